// Package limiter is a rate limiter on Redis, exact to the definition of
// each of its algorithms: the sliding-window log (the default), fixed window,
// sliding-window counter, GCRA and token bucket.
//
// By default each (client key, policy) owns one sorted set whose members are
// the allowed requests and whose scores are their arrival times on Redis's own
// clock. The other algorithms keep a few numbers per rule in one hash. Every
// decision is one Lua script that reads the clock, decides and records
// atomically, so any number of concurrent callers, on any number of app
// instances, can never let more through than the algorithm allows: there is
// no window between the check and the act.
package limiter

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdb"
)

// MaxSnapshot bounds the entries one Window snapshot returns.
const MaxSnapshot = 1000

// rediser lists exactly what the limiter needs of Redis, so a Client, a
// ClusterClient or a Ring all fit.
type rediser interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	TxPipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Limiter decides requests against policies. It is safe for concurrent use.
type Limiter struct {
	rdb   rediser
	batch *batcher   // nil: one round trip per check
	cache *denyCache // nil: no local deny cache
	// resets is the resets channel of rdb's database.
	resets string
	// replicas must hold an allowed decision before it is answered
	// (WithDurableReplicas); 0: none.
	replicas int
	// running is set while Run follows resets.
	running atomic.Bool
	// cal is the clock quota periods are computed around: the machine's,
	// unless a test shifts it.
	cal calendar
}

// New returns a Limiter over rdb. Concurrent checks are batched into
// pipelines unless WithoutBatching is given: a check costs ~37 µs of client CPU
// as its own round trip and ~5 µs sharing one. The local deny cache holds
// DefaultDenyCacheSize denials unless WithDenyCache says otherwise; it
// answers only while Run runs.
func New(rdb redis.UniversalClient, opts ...Option) *Limiter {
	l := &Limiter{rdb: rdb, resets: redisdb.Channel(resetsChannel, rdb)}
	WithBatching(DefaultMaxBatch, DefaultMaxInFlight)(l)
	WithDenyCache(DefaultDenyCacheSize)(l)
	for _, o := range opts {
		o(l)
	}
	if l.batch != nil {
		l.batch.replicas = l.replicas
	}
	return l
}

// ErrInvalidCost is returned for a cost below 1 or above the policy's
// MaxCost: its smallest limit (a larger cost could never pass) and, for the
// log, 1,000.
var ErrInvalidCost = errors.New("cost must be from 1 to the policy's smallest limit, and at most 1000 for log")

// Decision is the outcome of one Allow call.
//
// A caller refuses the request iff Denied(): a shadow policy's denial is a
// would-deny (WouldDeny), answered as allowed. A Cached decision was answered
// by this instance's local deny cache without asking Redis.
//
// Example: policy demo=5/10s, four entries in the window, the oldest at
// t=1000, now t=4000. A request of cost 1 is allowed: Count 5, Remaining 0,
// OldestMs 1000, RetryAfterMs 0. The next one at t=4500 is denied: Count 5,
// RetryAfterMs = 1000 + 10000 - 4500 = 6500; waiting exactly that long, the
// t=1000 entry is out and the request passes.
//
// The same policy as demo=5/10s@gcra: the emission interval is 2000 ms and a
// fresh key takes 5 at once. After five at t=4000 the TAT is 14000; the sixth
// at t=4500 is denied with RetryAfterMs = 14000 + 2000 - 10000 - 4500 = 1500:
// at t=6000 one more fits.
type Decision struct {
	// Allowed reports whether the request was admitted and recorded. A denied
	// request changes nothing in Redis.
	Allowed bool
	Key     string
	Policy  string
	// Algorithm is the policy's algorithm.
	Algorithm Algorithm
	Cost      int
	// NowMs is Redis's clock when the script ran, in epoch milliseconds: for
	// the log, the score of the recorded entries.
	NowMs int64
	// RetryAfterMs is 0 when allowed; when denied, the exact wait until every
	// violated rule has room for Cost (if nobody else uses it): the first
	// millisecond at which the same request would be allowed.
	RetryAfterMs int64
	// ID identifies the request when allowed: a UUID v4. For the log it is
	// the member of the recorded entry, and a cost of n records ID, ID:1 …
	// ID:n-1; the other algorithms store no per-request data.
	ID string
	// Rules holds each rule's state, in the policy's order.
	Rules []RuleState
	// Binding indexes the rule that decided: when denied, the violated rule
	// with the longest retry; when allowed, the rule with the least remaining
	// (tie: the shorter window).
	Binding int
	// Shadow is the policy's Shadow flag: the decision was made and
	// recorded exactly as if enforced (a denial records nothing), but the
	// caller lets the request through. Allowed stays what enforcing would
	// have decided, so !Allowed is a would-deny with its RetryAfterMs.
	Shadow bool
	// Peek marks the answer to Peek: what Allow would have decided, with
	// nothing recorded (no ID; counts without the request's cost).
	Peek bool
	// Cached marks a denial answered by the local deny cache, with no Redis
	// round trip: Allowed is false and RetryAfterMs counts down from the
	// denial it repeats, from when that answer was received. Redis ran that
	// check before, so the wait is never shorter than Redis would say now
	// (and longer by at most that check's round trip): waiting it out, the
	// request is allowed unless others took the room. NowMs is Redis's clock
	// estimated the same way, so NowMs + RetryAfterMs is Redis's deadline;
	// each rule's RetryMs and ResetMs have moved on by the time elapsed
	// (never below 0), while Count, Remaining and OldestMs are as Redis
	// reported them in that denial. The cache stops answering, counted from
	// when the denied check was sent, no later than the true deadline.
	Cached bool
	// Locked marks a denial of a policy with a lock (Policy.Lock): the key
	// is locked out, every check on the policy is denied and records
	// nothing until LockUntilMs (epoch ms on Redis's clock). The denial that
	// locks the key is Locked too. LockLevel counts the locks of this key
	// in a row (1, 2, 3 …): each within 24 h of the last one's end doubles
	// the time, up to 24 h. RetryAfterMs is the lock's remaining time, or
	// the rules' own retry when that is longer.
	Locked      bool
	LockLevel   int
	LockUntilMs int64
	// BookedMs, when not 0, is the slot a check that may wait
	// (Within.Wait) booked instead of being denied: the score, on Redis's
	// clock and after NowMs, at which its entries were recorded — the first
	// moment its cost fits, which no later request can take. The request is
	// Allowed, but not yet: its caller holds it until the slot, WaitMs
	// after NowMs (or refunds it by ID when it gives up). Rules, Binding
	// and the RateLimit values they give describe the windows at the slot,
	// this request included.
	//
	// Example: demo=5/10s holds five entries, the oldest at t=1000; a check
	// at t=4500 that may wait 10 s books t=11000: BookedMs 11000, WaitMs
	// 6500, Count 5 (the four younger entries and this one), OldestMs 2000
	// when the second oldest is at t=2000.
	BookedMs int64
	// Override names the per-client override whose rules decided, when a
	// caller decided under one instead of the policy's own rules: "key"
	// (this client's own) or "prefix:<prefix>" (every key starting with
	// it). The limiter never sets it; httplimit.Checker does, from the
	// policy its Resolve chose, so answers and live views can say so.
	Override string
}

// Booked reports a booking: the request is allowed at BookedMs, not now.
func (d Decision) Booked() bool { return d.BookedMs > 0 }

// WaitMs is how long a booked request waits for its slot, from NowMs: 0
// unless Booked.
func (d Decision) WaitMs() int64 {
	if !d.Booked() {
		return 0
	}
	return d.BookedMs - d.NowMs
}

// Denied reports whether the caller must refuse the request: denied and not
// a shadow policy.
func (d Decision) Denied() bool { return !d.Allowed && !d.Shadow }

// WouldDeny reports a shadow policy's denial: the caller lets the request
// through, and reports that enforcing would have refused it for RetryAfterMs.
func (d Decision) WouldDeny() bool { return !d.Allowed && d.Shadow }

// RuleState is one rule's state after a decision, or in a Window snapshot.
// Count and Remaining read alike for every algorithm: Count is what the rule
// counts as used, Remaining = max(0, Limit - Count) is how many requests of
// cost 1 would still be allowed now.
//
// A quota rule (Period set) has no window: WindowMs is 0, PeriodMs is the
// length of the period holding now (a day of 23, 24 or 25 hours, a month of
// its days), Count is its counter (with this request's cost when it was
// recorded), OldestMs -1, ResetMs the time to the period's end whatever the
// count, and RetryMs, when violated, the time to the next period's start.
//
// Example: api=10/1s,1000/day, the 1,000th request of the day allowed at
// 18:00 UTC: Rules[1] is {Limit 1000, Period "day", PeriodMs 86400000,
// Count 1000, Remaining 0, ResetMs 21600000}; the next one is denied with
// RetryMs (and RetryAfterMs) 21600000 minus the time between them.
type RuleState struct {
	Limit    int
	WindowMs int64
	// Period names a quota rule's period (Day, Week, Month); "" for a
	// window. PeriodMs is the length of its period holding now.
	Period   Period
	PeriodMs int64
	// Count, including this request's cost when it was allowed: for the log
	// the entries inside the window; for fixed the current window's count;
	// for counter the weighted estimate rounded up; for gcra and bucket the
	// part of the burst used (Limit minus the whole requests that fit now).
	Count     int
	Remaining int
	// OldestMs is, for the log, the oldest score inside the window; -1 when
	// the window is empty and for the algorithms that keep no entries.
	OldestMs int64
	// ResetMs is what the RateLimit header's t counts down: for the log, until
	// the oldest entry slides out; for fixed, until the current window ends;
	// for counter, until the weighted estimate is back to 0; for gcra, until
	// the TAT is now (the whole burst is back); for bucket, until the bucket
	// is full. It is 0 when the rule has full room — but for a quota, whose
	// count starts again at its period's end: until then, always.
	ResetMs int64
	// Violated reports that this rule had no room for the request.
	Violated bool
	// RetryMs is, for a violated rule, the wait until it has room.
	RetryMs int64

	// State is the algorithm's own state of the rule: nil for the log, whose
	// state is its entries (Window.Entries).
	State State
}

// Bound is the binding rule's state.
func (d Decision) Bound() RuleState { return d.Rules[d.Binding] }

// Allow decides one request of the given cost for key under p and, when it is
// allowed, records it. It is exact under any concurrency. A shadow policy is
// decided and recorded the same way (see Decision.Shadow).
//
// While the local deny cache knows that key has no room under p even for a
// request of cost 1, Allow answers a request of cost 1, or of the cost of the
// denial the cache keeps, from the cache (Decision.Cached); any other cost is
// asked of Redis, whose denial then replaces the cached one.
func (l *Limiter) Allow(ctx context.Context, key string, p Policy, cost int) (Decision, error) {
	return l.AllowWithin(ctx, Within{}, key, p, cost)
}

// Within bounds how long a check that needs Redis may take; one that fails
// to finish in time fails with context.DeadlineExceeded. An answer from the
// local deny cache needs no bound, and takes no timer, so a flood of cached
// denials costs no timer per check.
type Within struct {
	// RoundTrip bounds Redis's answer, counted from when the check leaves
	// for Redis: time it spent queued behind pipelines in flight (batching)
	// — which on a CPU-starved machine is where the time goes — does not
	// count against Redis. A pipeline lives until the latest bound of the
	// checks it carries. 0: no bound of its own.
	RoundTrip time.Duration
	// Total bounds the whole check, queueing included. 0: no bound but
	// ctx's.
	Total time.Duration
	// Wait lets a check that the log's rules would deny book the first
	// moment its cost fits, when that is at most Wait away (up to MaxWait):
	// it is recorded at that future moment in the same script run, so no
	// later request takes the slot and no window ever holds more than its
	// limit, and the Decision is allowed with BookedMs set. A retry beyond
	// Wait is denied as without it, and books nothing. Only the log books
	// (ErrWaitNotLog); a shadow policy, which never holds a request, and a
	// key that is locked out book nothing; a policy with calendar quotas
	// books only a slot inside the quota period holding now, whose quota
	// the booking takes. 0: no booking. Milliseconds count: less than 1 ms
	// is 0.
	Wait time.Duration
}

// AllowWithin is Allow bounded by w when the decision needs Redis.
func (l *Limiter) AllowWithin(ctx context.Context, w Within, key string, p Policy, cost int) (Decision, error) {
	if err := ValidateKey(key); err != nil {
		return Decision{}, err
	}
	if p.InFlight() {
		return Decision{}, ErrInFlight
	}
	if !p.CostFits(cost) {
		return Decision{}, ErrInvalidCost
	}
	waitMs, err := bookingWait(w.Wait, p)
	if err != nil {
		return Decision{}, err
	}
	k := cacheKey{key: key, policy: p.Name}
	var sent int64
	var t ticket
	// A CountDenied policy counts every denial in Redis: the cache, which
	// would answer some without counting them, stays out of its way.
	cache := l.cache
	if p.CountDenied {
		cache = nil
	}
	if c := cache; c != nil {
		// Taken before the check leaves (batching may queue it): the cache's
		// deadline counts from here, which is never after Redis ran the check.
		sent = c.now()
		d, miss, ok := c.lookup(k, p, cost, sent, max(0, waitMs))
		if ok {
			return d, nil
		}
		t = miss
	}
	if w.Total > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.Total)
		defer cancel()
	}
	var d Decision
	var retry1 []int64
	if waitMs != noBooking {
		d, retry1, err = logAlgorithm{}.decide(ctx, l, w.RoundTrip, key, p, cost, false, waitMs)
	} else {
		d, retry1, err = algorithmOf(p).allow(ctx, l, w.RoundTrip, key, p, cost, false)
	}
	if err != nil {
		return Decision{}, err
	}
	d.Shadow = p.Shadow
	switch {
	case cache != nil && d.Booked():
		// A denial this instance keeps tells a retry the booking made
		// longer: the next check asks Redis for the true one. (Another
		// instance's entry reports the shorter wait until it expires, no
		// later than the old retry: its promise holds, others took the
		// room.)
		cache.invalidate(k)
	case cache != nil && !d.Allowed:
		cache.store(t, k, p, d, retry1, sent, cache.now())
	}
	return d, nil
}

// eval runs one decision script, in the next pipeline when batching, and
// gives Redis roundTrip (0: no bound but ctx's) from when it is sent.
func (l *Limiter) eval(ctx context.Context, roundTrip time.Duration, s *redis.Script, keys []string, args []any) ([]int64, error) {
	if l.batch != nil {
		return l.batch.run(ctx, roundTrip, s, keys, args)
	}
	c := &call{ctx: ctx, roundTrip: roundTrip, script: s, keys: keys, args: args, done: make(chan struct{})}
	c.bound(time.Now())
	if !c.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.deadline)
		defer cancel()
	}
	if l.replicas > 0 { // WAIT needs the script's connection: a pipeline of one
		(&batcher{rdb: l.rdb, replicas: l.replicas}).sendCalls(ctx, []*call{c})
		return c.res, c.err
	}
	return s.Run(ctx, l.rdb, keys, args...).Int64Slice()
}

func binding(d Decision) int {
	best := 0
	for i, s := range d.Rules {
		b := d.Rules[best]
		switch {
		case !d.Allowed:
			if s.Violated && (!b.Violated || s.RetryMs > b.RetryMs) {
				best = i
			}
		case s.Remaining < b.Remaining || (s.Remaining == b.Remaining && s.spanMs() < b.spanMs()):
			best = i
		}
	}
	return best
}

// spanMs is what a rule counts over now: its window, or its period.
func (r RuleState) spanMs() int64 { return max(r.WindowMs, r.PeriodMs) }
