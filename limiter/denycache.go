package limiter

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultDenyCacheSize is how many (key, policy) denials the local deny cache
// holds unless WithDenyCache says otherwise: a few MB at most, enough for the
// keys of a flood.
const DefaultDenyCacheSize = 10_000

// denyCacheShardMin is the least capacity a shard is given: below
// denyCacheShards × this, one shard (an exact LRU) is cheap enough.
const (
	denyCacheShards   = 16
	denyCacheShardMin = 64
)

// WithDenyCache sets how many (key, policy) denials the local deny cache holds
// at most (least recently used first out); 0 turns the cache off. The cache
// answers only while Run keeps its subscription to resets (see Run).
func WithDenyCache(size int) Option {
	return func(l *Limiter) {
		if size <= 0 {
			l.cache = nil
			return
		}
		l.cache = newDenyCache(size)
	}
}

// denyCache is the local deny cache: after a denial that left some rule
// without room even for a request of cost 1, it answers that (key, policy)
// itself until the first moment one could fit.
//
// Redis ran the denied check at some moment between when it was sent and
// when its answer was received, so the cache keeps two clocks. Its entry
// expires measured from the send: it never outlives the true retry time, and
// the first request after it goes to Redis. The times it reports are
// measured from the receipt: never shorter than the truth, so a client that
// waits exactly what it was told is never denied by the same window.
//
// Why that is exact: while any rule of a policy has no room for cost 1, every
// request on that (key, policy) is denied, so nothing is written and every
// rule's retry deadline stays where Redis put it (entries only slide out; a
// fixed or counter window only rolls on; a TAT or a bucket only drips; a
// full quota stays full until its period ends, and no entry sliding out
// frees it earlier). Only
// a reset or a different definition of the policy can change that: resets
// arrive through Run's subscription, and entries are keyed by the policy's
// name and matched against its whole definition.
//
// Entries live in shards, each a map plus an LRU list under its own mutex; a
// shard's seq moves on every invalidation or flush, so a denial whose check
// was sent before one is not stored after it.
type denyCache struct {
	base    time.Time // the monotonic origin of every ns value here
	seed    maphash.Seed
	shards  []denyShard
	serving atomic.Bool // Run's subscription is up: entries may be stored and served
}

type cacheKey struct{ key, policy string }

type denyShard struct {
	mu   sync.Mutex
	m    map[cacheKey]*denyEntry
	lru  denyEntry // sentinel: lru.next is the most recently used
	cap  int
	seq  uint64
	hits uint64
	_    [64]byte // keeps neighbouring shards' locks off one cache line
}

// denyEntry is one denial as Redis answered it.
type denyEntry struct {
	k cacheKey
	// The policy's definition when the denial was made.
	rules     []Rule
	algorithm Algorithm
	shadow    bool
	timezone  string // where its quotas' periods end
	// sentNs is when the denied check was sent and recvNs when its answer
	// was received, on the cache's clock: the entry expires counted from the
	// first, and what it reports counts from the second.
	sentNs, recvNs int64
	// retry1 is, per rule, the wait after d.NowMs until a request of cost 1
	// fits; until1 is the largest.
	retry1 []int64
	until1 int64
	d      Decision

	prev, next *denyEntry
}

// ticket is what a miss hands to the store that follows it: the shard and
// its seq when the check was sent (no shard while the cache does not serve).
type ticket struct {
	s   *denyShard
	seq uint64
}

func newDenyCache(size int) *denyCache {
	n := 1
	if size >= denyCacheShards*denyCacheShardMin {
		n = denyCacheShards
	}
	c := &denyCache{base: time.Now(), seed: maphash.MakeSeed(), shards: make([]denyShard, n)}
	for i := range c.shards {
		s := &c.shards[i]
		s.m = make(map[cacheKey]*denyEntry)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		s.cap = size / n
		if i < size%n {
			s.cap++
		}
	}
	return c
}

// now is the cache's monotonic clock in ns.
func (c *denyCache) now() int64 { return int64(time.Since(c.base)) }

func (c *denyCache) shardOf(k cacheKey) *denyShard {
	if len(c.shards) == 1 {
		return &c.shards[0]
	}
	h := maphash.String(c.seed, k.key) ^ maphash.String(c.seed, k.policy)*0x9e3779b97f4a7c15
	return &c.shards[h%uint64(len(c.shards))]
}

// lookup answers a request of cost for k under p at nowNs from the cache, if
// it can do so exactly; else it returns a ticket for the store that follows.
//
// The rule for costs: an entry proves that a request of cost 1 does not fit
// before its deadline, and then no cost fits. It knows the exact retry for
// cost 1 and for the cost of the denial it keeps; a request of any other
// cost goes to Redis (whose denial then replaces the entry).
//
// A request that may wait waitMs for a slot (Within.Wait; 0: none) is
// answered only when its retry is surely longer than that, so Redis would
// deny it too: measured from the send, the retry the entry knows is never
// longer than Redis's now (a booking since only made it longer). One whose
// retry may be within its wait goes to Redis to book.
func (c *denyCache) lookup(k cacheKey, p Policy, cost int, nowNs, waitMs int64) (Decision, ticket, bool) {
	if !c.serving.Load() {
		return Decision{}, ticket{}, false // a ticket no store accepts
	}
	s := c.shardOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	t := ticket{s: s, seq: s.seq}
	e := s.m[k]
	if e == nil {
		return Decision{}, t, false
	}
	if !e.sameDefinition(p) {
		s.remove(e)
		return Decision{}, t, false
	}
	// Redis ran the denied check after it was sent, so the time since then,
	// rounded up, is at least as long as Redis's clock has moved since: the
	// entry ends no later than the true retry.
	sinceSent := (nowNs - e.sentNs + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	if e.until1-sinceSent <= 0 {
		s.remove(e)
		return Decision{}, t, false
	}
	// It ran before its answer was received, so the time since then, rounded
	// down, is at most as long: the wait reported is never too short.
	d, ok := e.answer(cost, max(0, (nowNs-e.recvNs)/int64(time.Millisecond)))
	if !ok {
		return Decision{}, t, false
	}
	if waitMs > 0 {
		if least, ok := e.answer(cost, sinceSent); !ok || least.RetryAfterMs <= waitMs {
			return Decision{}, t, false
		}
	}
	s.toFront(e)
	s.hits++
	return d, t, true
}

// store keeps a denial of Redis's whose check was sent at sentNs and
// answered at recvNs, when some rule had no room even for cost 1 and nothing
// invalidated the shard since the ticket was taken.
func (c *denyCache) store(t ticket, k cacheKey, p Policy, d Decision, retry1 []int64, sentNs, recvNs int64) {
	if d.Allowed || len(retry1) == 0 || !c.serving.Load() {
		return
	}
	until1 := slices.Max(retry1)
	if until1 <= 0 {
		return
	}
	s := t.s
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seq != t.seq {
		return
	}
	if old := s.m[k]; old != nil {
		s.remove(old)
	}
	d.Rules = slices.Clone(d.Rules)
	e := &denyEntry{
		k: k, rules: slices.Clone(p.Rules), algorithm: p.AlgorithmName(), shadow: p.Shadow, timezone: p.Timezone,
		sentNs: sentNs, recvNs: recvNs, retry1: retry1, until1: until1, d: d,
	}
	s.m[k] = e
	s.pushFront(e)
	for len(s.m) > s.cap {
		s.remove(s.lru.prev)
	}
}

// invalidate drops k's entry, whatever definition it was made under.
func (c *denyCache) invalidate(k cacheKey) {
	s := c.shardOf(k)
	s.mu.Lock()
	s.seq++
	if e := s.m[k]; e != nil {
		s.remove(e)
	}
	s.mu.Unlock()
}

// forget drops every entry of the named policies, in one pass over the
// cache however many they are.
func (c *denyCache) forget(policies ...string) {
	named := make(map[string]bool, len(policies))
	for _, p := range policies {
		named[p] = true
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.seq++
		for k, e := range s.m {
			if named[k.policy] {
				s.remove(e)
			}
		}
		s.mu.Unlock()
	}
}

// setServing empties the cache and says whether it may serve: false when the
// subscription is lost (a reset may go unheard), true once it is back — after
// the flush, since resets may have been missed meanwhile.
func (c *denyCache) setServing(on bool) {
	if !on {
		c.serving.Store(false)
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.seq++
		clear(s.m)
		s.lru.next, s.lru.prev = &s.lru, &s.lru
		s.mu.Unlock()
	}
	if on {
		c.serving.Store(true)
	}
}

func (c *denyCache) stats() DenyCacheStats {
	st := DenyCacheStats{Serving: c.serving.Load()}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		st.Denials += s.hits
		st.Entries += len(s.m)
		st.Size += s.cap
		s.mu.Unlock()
	}
	return st
}

func (e *denyEntry) sameDefinition(p Policy) bool {
	return e.algorithm == p.AlgorithmName() && e.shadow == p.Shadow && e.timezone == p.Timezone && slices.Equal(e.rules, p.Rules)
}

// answer is the entry's denial for a request of cost, elapsed ms after the
// denial was received; ok is false for a cost whose retry it does not know.
// Times move on by elapsed and stop at 0; counts stay as Redis reported them.
func (e *denyEntry) answer(cost int, elapsed int64) (Decision, bool) {
	if cost != 1 && cost != e.d.Cost {
		return Decision{}, false
	}
	d := e.d
	d.Cost, d.Cached, d.RetryAfterMs = cost, true, 0
	d.NowMs += elapsed
	d.Rules = make([]RuleState, len(e.d.Rules))
	for i, r := range e.d.Rules {
		retry := r.RetryMs
		if cost == 1 {
			retry = e.retry1[i]
		}
		r.RetryMs = max(0, retry-elapsed)
		r.Violated = r.RetryMs > 0
		r.ResetMs = max(0, r.ResetMs-elapsed)
		d.Rules[i] = r
		d.RetryAfterMs = max(d.RetryAfterMs, r.RetryMs)
	}
	if d.RetryAfterMs <= 0 {
		return Decision{}, false
	}
	d.Binding = binding(d)
	return d, true
}

func (s *denyShard) pushFront(e *denyEntry) {
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
}

func (s *denyShard) toFront(e *denyEntry) {
	if s.lru.next == e {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	s.pushFront(e)
}

func (s *denyShard) remove(e *denyEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	delete(s.m, e.k)
}

// DenyCacheStats describes the local deny cache.
type DenyCacheStats struct {
	// Denials counts the requests the cache answered, since the Limiter was
	// made: what ratescope_local_denials_total exports.
	Denials uint64
	// Entries is how many (key, policy) denials it holds now, at most Size.
	Entries int
	Size    int
	// Serving reports whether Run's subscription to resets is up: only then
	// does the cache store and answer.
	Serving bool
}

// DenyCacheStats reports the local deny cache's counters; all zero when the
// cache is off.
func (l *Limiter) DenyCacheStats() DenyCacheStats {
	if l.cache == nil {
		return DenyCacheStats{}
	}
	return l.cache.stats()
}

// ForgetKey drops the local deny cache's entry of key under the named
// policy, on this instance, whatever definition it was made under: for a
// change of that one client's rules (an override) that other instances
// announce. It costs one shard's lock, not a walk of the cache.
func (l *Limiter) ForgetKey(key, policy string) {
	if l.cache != nil {
		l.cache.invalidate(cacheKey{key: key, policy: policy})
	}
}

// Forget drops the local deny cache's entries of the named policies, on
// this instance: for a configuration reload that changes or removes them.
// (Entries made under another definition of a policy are never served
// anyway; Forget frees their room at once.) It walks the cache once, so a
// reload that changes a hundred thousand policies costs one walk, not one
// each.
func (l *Limiter) Forget(policies ...string) {
	if l.cache != nil && len(policies) > 0 {
		l.cache.forget(policies...)
	}
}
