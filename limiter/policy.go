package limiter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds of a policy, from SPEC §1. The log stores one entry per request, so
// its limit is the smaller one; the other algorithms keep a few numbers per
// rule whatever the limit.
const (
	MaxLimit    = 10_000_000
	MaxLogLimit = 100_000
	MinWindow   = time.Second
	MaxWindow   = 7 * 24 * time.Hour
	MaxKeyLen   = 128
	// MaxLogCost bounds the cost of one log check: it adds one entry per
	// unit of cost in one script, so no caller can hold Redis for long.
	MaxLogCost = 1000
)

// Rule is one limit over one window: at most Limit entries with a score inside
// (now - Window, now]. Or, when Period is set, a calendar quota: at most
// Limit in each day, week or month of the policy's time zone, counted by one
// counter per period; its Window is then 0 (it slides over nothing), and
// every consumer of rules must tell the two apart.
//
// Or, when InFlight is set, a limit of requests in flight: at most Limit
// leases live at once (its policy's Lease says how long one lasts unless
// renewed); its Window is 0 and its Period "", and such a rule is its
// policy's only one (Policy.InFlight).
type Rule struct {
	Limit    int
	Window   time.Duration
	Period   Period `json:",omitempty"`
	InFlight bool   `json:",omitempty"`
}

// WindowMs is the window in milliseconds, the unit scores are kept in; 0
// for a quota rule.
func (r Rule) WindowMs() int64 { return r.Window.Milliseconds() }

// String writes the rule as a policy does: "5/1m", "100000/month",
// "4/inflight".
func (r Rule) String() string {
	if r.InFlight {
		return fmt.Sprintf("%d/inflight", r.Limit)
	}
	if r.Period != "" {
		return fmt.Sprintf("%d/%s", r.Limit, r.Period)
	}
	return fmt.Sprintf("%d/%s", r.Limit, WindowString(r.Window))
}

// Policy is a named set of rules checked together, e.g. login=5/1m,20/1h: at
// most 5 a minute and 20 an hour. Rules are sorted by window, shortest
// first, then the quota rules: day, week, month. Build one with
// ParsePolicy, which fills every field.
type Policy struct {
	Name  string
	Rules []Rule
	// Timezone is the IANA zone (Go's time package names) whose days,
	// weeks and months the quota rules count: "+tz=Europe/Berlin". Empty
	// means UTC.
	Timezone string `json:",omitempty"`
	// Algorithm is how the windows are kept (SPEC §8). Empty means Log.
	Algorithm Algorithm
	// Shadow marks a policy decided and recorded as if enforced, whose
	// callers answer allow anyway (SPEC §9). The limiter itself decides a
	// shadow policy exactly like any other.
	Shadow bool
	// CountDenied counts every request's cost, allowed or not, as
	// envoyproxy/ratelimit's counters do (an INCRBY whatever the answer): a
	// window's count may pass its limit, and a request is allowed iff the
	// count with it is at most the limit. Such a policy takes any cost from
	// 1 to MaxCountedCost, and the local deny cache never answers for it
	// (it would leave answered denials uncounted). Only Fixed counts this
	// way; ParsePolicy never sets it, and the other algorithms ignore it.
	CountDenied bool `json:",omitempty"`
	// Lock, when not 0, locks a key out once the policy denies it: for Lock
	// from that denial every check on the policy is denied (Decision.Locked)
	// and records nothing; each new lock within 24 h of the last one's end
	// doubles the time, up to MaxLock. A Reset clears the lock and its
	// history. "+lock=15m" in a policy string.
	Lock time.Duration `json:",omitempty"`
	// Lease is how long a lease of an inflight policy lasts unless renewed
	// (InFlight): "+lease=45s"; ParsePolicy sets DefaultLease when none is
	// given. 0 for every other policy.
	Lease time.Duration `json:",omitempty"`
}

// Bounds of a lock (Policy.Lock): from a second to a day.
const (
	MinLock = time.Second
	MaxLock = 24 * time.Hour
)

// MaxCountedCost bounds the cost of one request under CountDenied, as
// envoyproxy/ratelimit's hits are counted in whole numbers Lua keeps exact.
const MaxCountedCost = 1<<32 - 1

// CostFits reports whether cost is one p takes: 1 to MaxCost.
func (p Policy) CostFits(cost int) bool { return cost >= 1 && cost <= p.MaxCost() }

// AlgorithmName is p.Algorithm with the default filled in: Log.
func (p Policy) AlgorithmName() Algorithm {
	if p.Algorithm == "" {
		return Log
	}
	return p.Algorithm
}

// Longest is the longest window of the policy: entries older than that count
// for no rule and may be evicted. Quota rules keep no window: 0 when the
// policy has only those.
func (p Policy) Longest() time.Duration {
	var w time.Duration
	for _, r := range p.Rules {
		w = max(w, r.Window)
	}
	return w
}

// MaxCost is the largest cost one request may have: the smallest limit (a
// larger cost could never pass) and at most its algorithm's Descriptor.MaxCost
// (for the log, which adds an entry per unit of cost, MaxLogCost). Under
// CountDenied (Fixed) any cost up to MaxCountedCost is taken: a larger one
// than the limit is counted and denied.
func (p Policy) MaxCost() int {
	if p.CountDenied && algorithmOf(p).countsDenied() {
		return MaxCountedCost
	}
	if r, ok := registry[p.AlgorithmName()]; ok && r.MaxCost > 0 {
		return min(p.SmallestLimit(), r.MaxCost)
	}
	return p.SmallestLimit()
}

// SmallestLimit is the smallest limit of the policy's rules, quota rules
// included.
func (p Policy) SmallestLimit() int {
	m := MaxLimit
	for _, r := range p.Rules {
		m = min(m, r.Limit)
	}
	return m
}

// String gives the policy back in the form ParsePolicy reads; "@log" is
// left out, as the default.
func (p Policy) String() string {
	parts := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		parts[i] = r.String()
	}
	s := p.Name + "=" + strings.Join(parts, ",")
	if a := p.AlgorithmName(); a != Log && a != InFlight { // an inflight rule says it
		s += "@" + string(a)
	}
	if p.Shadow {
		s += "+shadow"
	}
	if p.Lock > 0 {
		s += "+lock=" + WindowString(p.Lock)
	}
	if p.Timezone != "" {
		s += "+tz=" + p.Timezone
	}
	if p.Lease > 0 {
		s += "+lease=" + WindowString(p.Lease)
	}
	return s
}

// WindowString writes a window in its largest whole unit, as a policy is
// written: 1m, not 1m0s; 90s; 24h. A window of a fraction of a second (the
// lab's) keeps Go's form.
func WindowString(w time.Duration) string {
	switch {
	case w%time.Second != 0 || w <= 0:
		return w.String()
	case w%time.Hour == 0:
		return fmt.Sprintf("%dh", w/time.Hour)
	case w%time.Minute == 0:
		return fmt.Sprintf("%dm", w/time.Minute)
	}
	return fmt.Sprintf("%ds", w/time.Second)
}

// KeyAlphabet is what a client key may hold: 1 to MaxKeyLen bytes of these
// ranges and characters (SPEC §3). Braces are not among them, so a key can
// never break the Redis Cluster hash tag around it.
const KeyAlphabet = "A-Z a-z 0-9 . _ : @ / + = -"

// ErrInvalidKey is returned for a client key outside KeyAlphabet or MaxKeyLen.
var ErrInvalidKey = errors.New("key must be 1-" + strconv.Itoa(MaxKeyLen) + " bytes of " + KeyAlphabet)

// keyByte marks the bytes of KeyAlphabet.
var keyByte = func() (in [256]bool) {
	for _, tok := range strings.Fields(KeyAlphabet) {
		if len(tok) == 3 && tok[1] == '-' {
			for c := tok[0]; c <= tok[2]; c++ {
				in[c] = true
			}
			continue
		}
		in[tok[0]] = true
	}
	return in
}()

// ValidateKey checks a client key against KeyAlphabet and MaxKeyLen.
func ValidateKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return ErrInvalidKey
	}
	for i := 0; i < len(key); i++ {
		if !keyByte[key[i]] {
			return ErrInvalidKey
		}
	}
	return nil
}
