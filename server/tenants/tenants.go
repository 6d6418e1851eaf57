// Package tenants keeps per-client overrides of policies' rules: one client
// (a key), or every client whose key starts with a prefix, gets its own rules
// on a policy at run time, without a restart or a config change — a paying
// customer's higher limit, a noisy one's lower one.
//
// Overrides live in Redis, one hash per policy (HashKey), so they survive
// restarts and every instance shares them. Each instance holds them all in
// memory as an immutable snapshot that a check reads without a lock or a
// Redis round trip (Resolve: one map read when a policy has no overrides),
// and keeps it current over classic Pub/Sub: every change is announced by
// the script that makes it, and each instance re-reads a policy's hash when
// it (re)subscribes and whenever the hash's version differs from what it
// holds (checked every 30 s).
//
// An override changes only the rules. The policy's name stays, so the
// client keeps its log: a raised limit admits at once, a lowered one denies
// until enough entries slide out, exactly. The algorithm, shadow and lock
// stay the policy's.
package tenants

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdb"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// Override is one override as stored: of Key or of Prefix (one is set).
// Rules are as given, LIMIT/WINDOW each (ParseRules reads them). Its slices
// are shared: read, never change them.
type Override struct {
	Policy    string
	Key       string
	Prefix    string
	Rules     []string
	Note      string
	UpdatedMs int64 // when it was last set, on Redis's clock
}

// Label names the override in answers and decisions: "key" for a client's
// own, "prefix:<prefix>" for a prefix's.
func (o Override) Label() string {
	if o.Prefix != "" {
		return "prefix:" + o.Prefix
	}
	return "key"
}

// subject is its field in the policy's hash: key:<key> or prefix:<prefix>.
// Keys sort before prefixes, the listing order.
func (o Override) subject() string {
	if o.Prefix != "" {
		return prefixField + o.Prefix
	}
	return keyField + o.Key
}

// Match is which override applies to a key.
type Match string

const (
	MatchKey    Match = "key"    // the key's own
	MatchPrefix Match = "prefix" // the longest prefix of it that has one
	MatchNone   Match = "none"   // none: the policy's rules
)

// Subject is whom an override is for: a Key or a Prefix, exactly one.
type Subject struct {
	Key, Prefix string
}

func (s Subject) isPrefix() bool { return s.Prefix != "" }

func (s Subject) value() string {
	if s.isPrefix() {
		return s.Prefix
	}
	return s.Key
}

// Deps is what a Store uses.
type Deps struct {
	Redis redis.UniversalClient
	// Policies names the policies in force, asked at each re-read: the
	// hashes to read.
	Policies func() []string
	// Changed, when set, hears of every change this instance applies, its
	// own and others': one key's override (key set) or any of the policy's
	// (key "": a prefix, or a re-read) — so caches of decisions made under
	// the old rules, such as the limiter's local deny cache, drop them.
	Changed func(policy, key string)
	// Timeout bounds each Redis call the Store makes by itself; 0: 1 s.
	Timeout time.Duration
	// Log may be nil.
	Log *slog.Logger
}

// Store holds the overrides in force and changes them. It is safe for
// concurrent use; Run keeps it current.
type Store struct {
	deps    Deps
	channel string
	snap    atomic.Pointer[snapshot]
	mu      sync.Mutex    // one writer of snap (or of also) at a time
	poke    chan struct{} // Refresh
	down    bool          // Run's subscription failed and is not back: Run's alone
	syncs   atomic.Uint64
	// also hear of every change besides Deps.Changed (OnChange): parts
	// made after the Store, such as the live view.
	also atomic.Pointer[[]func(policy, key string)]
}

// snapshot is every policy's overrides at one moment; a policy without any
// has no set.
type snapshot struct {
	policies map[string]*policySet
}

// New returns a Store over deps; it holds nothing until Run has read Redis.
func New(deps Deps) *Store {
	if deps.Timeout <= 0 {
		deps.Timeout = time.Second
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Policies == nil {
		deps.Policies = func() []string { return nil }
	}
	s := &Store{deps: deps, channel: redisdb.Channel(channelName, deps.Redis), poke: make(chan struct{}, 1)}
	s.snap.Store(&snapshot{policies: map[string]*policySet{}})
	return s
}

// Lookup is the override that applies to key under policy, and how it
// matched: the key's own, else the longest prefix of it with one, else
// none (a zero Override).
func (s *Store) Lookup(policy, key string) (Override, Match) {
	ps := s.snap.Load().policies[policy]
	if ps == nil {
		return Override{}, MatchNone
	}
	e := ps.lookup(key)
	switch {
	case e == nil:
		return Override{}, MatchNone
	case e.o.Prefix != "":
		return e.o, MatchPrefix
	}
	return e.o, MatchKey
}

// Overridden reports whether an override applies to key under policy.
func (s *Store) Overridden(policy, key string) bool {
	ps := s.snap.Load().policies[policy]
	return ps != nil && ps.lookup(key) != nil
}

// Resolve is httplimit.Checker's Resolve: p with the rules of the override
// that applies to key, or p itself. For a policy without overrides it costs
// one map read.
func (s *Store) Resolve(key string, p *httplimit.Policy) *httplimit.Policy {
	ps := s.snap.Load().policies[p.Name]
	if ps == nil {
		return p
	}
	e := ps.lookup(key)
	if e == nil {
		return p
	}
	return e.policyFor(p)
}

// Get is the override of exactly this key or prefix, if there is one.
func (s *Store) Get(policy string, who Subject) (Override, bool) {
	ps := s.snap.Load().policies[policy]
	if ps == nil {
		return Override{}, false
	}
	if e := ps.get(who.isPrefix(), who.value()); e != nil {
		return e.o, true
	}
	return Override{}, false
}

// Count is how many overrides policy has.
func (s *Store) Count(policy string) int {
	if ps := s.snap.Load().policies[policy]; ps != nil {
		return ps.n
	}
	return 0
}

// List pages through policy's overrides, keys first then prefixes, each
// sorted: at most limit of them after the one named by after (a page's
// Next; "" for the first page). next is "" on the last page.
func (s *Store) List(policy, after string, limit int) (page []Override, next string) {
	ps := s.snap.Load().policies[policy]
	if ps == nil {
		return nil, ""
	}
	all := ps.list()
	i := 0
	if after != "" {
		var found bool
		i, found = slices.BinarySearchFunc(all, after, func(e *entry, t string) int { return cmp.Compare(e.o.subject(), t) })
		if found {
			i++
		}
	}
	end := min(len(all), i+limit)
	page = make([]Override, 0, end-i)
	for _, e := range all[i:end] {
		page = append(page, e.o)
	}
	if end < len(all) {
		next = page[len(page)-1].subject()
	}
	return page, next
}

// Refresh asks Run to compare every policy's version with Redis's now
// rather than at the next 30 s tick: after a reload that may add policies.
func (s *Store) Refresh() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// Syncs counts the times the Store compared every policy's overrides with
// Redis's, and re-read those that differed: from 1 on, it holds what Redis
// held at some moment since it started.
func (s *Store) Syncs() uint64 { return s.syncs.Load() }

// apply changes the snapshot with f, one writer at a time.
func (s *Store) apply(f func(cur map[string]*policySet) map[string]*policySet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.snap.Load().policies
	s.snap.Store(&snapshot{policies: f(cur)})
}

// setPolicy is cur with policy's set replaced (nil or empty: removed).
func setPolicy(cur map[string]*policySet, policy string, ps *policySet) map[string]*policySet {
	next := make(map[string]*policySet, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	if ps == nil || ps.n == 0 {
		delete(next, policy)
	} else {
		next[policy] = ps
	}
	return next
}

// OnChange adds f to what hears of every change this instance applies, as
// Deps.Changed does, for a part made after the Store: the live view, which
// tells the viewers of an overridden window its new rules. f runs on the
// goroutine that applies the change: it must be quick.
func (s *Store) OnChange(f func(policy, key string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fs []func(policy, key string)
	if cur := s.also.Load(); cur != nil {
		fs = append(fs, *cur...)
	}
	fs = append(fs, f)
	s.also.Store(&fs)
}

// changed tells Deps.Changed and those added by OnChange.
func (s *Store) changed(policy, key string) {
	if s.deps.Changed != nil {
		s.deps.Changed(policy, key)
	}
	if fs := s.also.Load(); fs != nil {
		for _, f := range *fs {
			f(policy, key)
		}
	}
}

// bound is ctx bounded by the Store's timeout.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.deps.Timeout)
}
