package limiter

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
)

// Algorithm names how a policy keeps its windows (SPEC §8): Log (the
// default), Fixed, Counter, GCRA or Bucket. Each is defined in a file of its
// own, with its script and its Descriptor; Algorithms lists them.
type Algorithm string

// Descriptor is what an algorithm says of itself besides deciding: what
// people call it, what it keeps, its bounds. ratescope's page, its lab and
// its docs read the algorithms from here; nothing else lists them.
//
// An algorithm's own state of a rule (RuleState.State) travels as a JSON
// member named Name: its wire form is the State's JSON encoding.
type Descriptor struct {
	Name Algorithm `json:"name"`
	// Title names it for people: "Sliding-window log".
	Title string `json:"title"`
	// Caption says in one line what it keeps and how it decides.
	Caption string `json:"caption"`
	// Tradeoff says in a sentence what it gives and what it costs, as
	// the lab shows them side by side.
	Tradeoff string `json:"tradeoff"`
	// MaxLimit is the largest limit a rule of a policy spec may have
	// (ParsePolicy): its ExactLimit, at most the limiter's MaxLimit.
	// register fills it in.
	MaxLimit int `json:"maxLimit"`
	// ExactLimit and ExactWindow bound what it decides exactly: the largest
	// limit and the longest window (0: any) of one rule. A policy spec is
	// held to less (MaxLimit, windows up to MaxWindow); a Policy built in
	// Go may use all of it, as server/envoyconf does for
	// envoyproxy/ratelimit's files, whose limits are any uint32 and whose
	// units reach a year.
	ExactLimit  int           `json:"exactLimit"`
	ExactWindow time.Duration `json:"exactWindow"`
	// MaxCost is the largest cost of one request besides the policy's
	// smallest limit (Policy.MaxCost); 0: the limit alone bounds it.
	MaxCost int `json:"maxCost"`
	// Entries reports that it keeps one entry per allowed request (the log)
	// rather than a few numbers per rule.
	Entries bool `json:"entries"`
	// Steps are what one decision does in Redis, in order, read from the
	// algorithm's script (Step); empty for an algorithm whose script is
	// not annotated.
	Steps []Step `json:"steps,omitempty"`
}

// registered is one algorithm: its descriptor, its place in lists and its
// implementation.
type registered struct {
	Descriptor
	order int
	impl  algorithm
}

// registry holds every algorithm, filled by register as the package loads.
var registry = map[Algorithm]*registered{}

// register adds an algorithm; each algorithm's file calls it once, from its
// init. order places it in Algorithms.
func register(order int, d Descriptor, impl algorithm) {
	if _, dup := registry[d.Name]; dup {
		panic("limiter: algorithm " + string(d.Name) + " registered twice")
	}
	if d.ExactLimit < 1 {
		panic("limiter: algorithm " + string(d.Name) + " registered without ExactLimit")
	}
	d.MaxLimit = min(d.ExactLimit, MaxLimit)
	registry[d.Name] = &registered{Descriptor: d, order: order, impl: impl}
}

// Algorithms describes every algorithm, the log first. The slice is the
// caller's.
func Algorithms() []Descriptor {
	rs := make([]*registered, 0, len(registry))
	for _, r := range registry {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *registered) int { return cmp.Compare(a.order, b.order) })
	out := make([]Descriptor, len(rs))
	for i, r := range rs {
		out[i] = r.Descriptor
	}
	return out
}

// Describe returns a's descriptor, or false when no algorithm is so named.
func Describe(a Algorithm) (Descriptor, bool) {
	r, ok := registry[a]
	if !ok {
		return Descriptor{}, false
	}
	return r.Descriptor, true
}

// AlgorithmNames lists every algorithm's name for people, the default (Log)
// first: "log, fixed, counter, gcra, bucket".
func AlgorithmNames() string {
	var b strings.Builder
	for i, d := range Algorithms() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(d.Name))
	}
	return b.String()
}

// algorithm is the seam between the Limiter and how one algorithm keeps its
// windows in Redis. Two implementations: the log (entries in a sorted set) and
// stateAlgorithm (a few numbers per rule in a hash), which the others share,
// each with its own script.
type algorithm interface {
	// allow decides one request of cost >= 1 (>= 0 for a peek, which
	// records nothing) for a valid key. When denied it also returns, per
	// rule, the wait until a request of cost 1 would fit (0 where one fits
	// now): what the local deny cache needs. Redis gets roundTrip (0: no
	// bound but ctx's) from when the call is sent.
	allow(ctx context.Context, l *Limiter, roundTrip time.Duration, key string, p Policy, cost int, peek bool) (Decision, []int64, error)
	// prepare builds the script call that allow sends, so several can share
	// one round trip (AllowEach); q is what p's quotas add to it.
	prepare(key string, p Policy, cost int, peek bool, q quotaCall) prepared
	// look builds the script call that describes the state of a valid key
	// without consuming anything, so many can share one round trip
	// (Windows); q is what p's quotas add to it.
	look(key string, p Policy, q quotaCall) lookup
	// countsDenied reports that it can count denied requests too
	// (Policy.CountDenied).
	countsDenied() bool
}

// algorithmOf returns p's algorithm; an unknown name (a Policy built by hand)
// falls back to the log, as an empty one does.
func algorithmOf(p Policy) algorithm {
	if p.InFlight() {
		return leaseAlgorithm{}
	}
	if r, ok := registry[p.AlgorithmName()]; ok {
		return r.impl
	}
	return registry[Log].impl
}

// stateKey is where key's state under p lives.
func stateKey(key string, p Policy) string {
	return redisdata.StateKey(key, p.Name, string(p.AlgorithmName()))
}

// allStateKeys are the keys of every algorithm for key under policy, and its
// lock: a reset clears them all — the lock and its history too — so a
// policy whose algorithm was changed by a reload cannot find stale state if
// it is changed back. (Its quotas' counters are named by their periods:
// Limiter.quotaKeys.)
func allStateKeys(key, policy string) []string {
	keys := make([]string, 0, len(registry)+1)
	for _, d := range Algorithms() {
		keys = append(keys, redisdata.StateKey(key, policy, string(d.Name)))
	}
	return append(keys, redisdata.LockKey(key, policy))
}

// lookup is one window's read: a script call (the state's key first, then
// its quotas' counters) and how to turn its reply into the Window.
type lookup struct {
	script *redis.Script
	keys   []string
	args   []any
	read   func(reply any) (Window, error)
}

// prepared is one decision script call, ready to send, and how to read its
// reply into a Decision (and, when denied, each rule's wait for cost 1).
type prepared struct {
	script *redis.Script
	keys   []string // the state's key first; then the lock's, when the policy locks, and the quotas' (withExtras)
	args   []any
	decide func(res []int64) (Decision, []int64, error)
}
