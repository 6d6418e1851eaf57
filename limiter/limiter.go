// Package limiter is an exact sliding-window-log rate limiter on Redis.
//
// Each (client key, policy) owns one sorted set whose members are the allowed
// requests and whose scores are their arrival times on Redis's own clock. One
// Lua script evicts, counts and records atomically, so any number of concurrent
// callers, on any number of app instances, can never let more through than the
// limit: there is no window between the check and the act.
package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// MaxEvict bounds how many expired entries one call removes, so no call blocks
// Redis for long however large a log grew; counting never relies on eviction.
const MaxEvict = 1000

// MaxSnapshot bounds the entries one Window snapshot returns.
const MaxSnapshot = 1000

var (
	//go:embed check.lua
	checkSrc    string
	checkScript = redis.NewScript(checkSrc)

	//go:embed window.lua
	windowSrc    string
	windowScript = redis.NewScript(windowSrc)
)

// rediser lists exactly what the limiter needs of Redis, so a Client, a
// ClusterClient or a Ring all fit.
type rediser interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Pipeline() redis.Pipeliner
}

// Limiter decides requests against policies. It is safe for concurrent use.
type Limiter struct {
	rdb   rediser
	batch *batcher // nil: one round trip per check
}

// New returns a Limiter over rdb. Concurrent checks are batched into
// pipelines unless WithoutBatching is given: a check costs ~37 µs of client CPU
// as its own round trip and ~5 µs sharing one.
func New(rdb redis.UniversalClient, opts ...Option) *Limiter {
	l := &Limiter{rdb: rdb}
	WithBatching(DefaultMaxBatch, DefaultMaxInFlight)(l)
	for _, o := range opts {
		o(l)
	}
	return l
}

// ErrInvalidCost is returned for a cost below 1 or above the policy's smallest
// limit (such a request could never pass).
var ErrInvalidCost = errors.New("cost must be from 1 to the policy's smallest limit")

// Decision is the outcome of one Allow call.
//
// Example: policy demo=5/10s, four entries in the window, the oldest at
// t=1000, now t=4000. A request of cost 1 is allowed: Count 5, Remaining 0,
// OldestMs 1000, RetryAfterMs 0. The next one at t=4500 is denied: Count 5,
// RetryAfterMs = 1000 + 10000 - 4500 = 6500; waiting exactly that long, the
// t=1000 entry is out and the request passes.
type Decision struct {
	// Allowed reports whether the request was admitted and recorded. A denied
	// request leaves no entry.
	Allowed bool
	Key     string
	Policy  string
	Cost    int
	// NowMs is Redis's clock when the script ran, in epoch milliseconds: the
	// score of the recorded entries.
	NowMs int64
	// RetryAfterMs is 0 when allowed; when denied, the exact wait until every
	// violated rule has room for Cost more entries (if nobody else uses it).
	RetryAfterMs int64
	// ID is the member of the recorded entry when allowed: a UUID v4. A cost of
	// n records ID, ID:1 … ID:n-1.
	ID string
	// Rules holds each rule's state, in the policy's order.
	Rules []RuleState
	// Binding indexes the rule that decided: when denied, the violated rule
	// with the longest retry; when allowed, the rule with the least remaining
	// (tie: the shorter window).
	Binding int
}

// RuleState is one rule's view of the log after the decision.
type RuleState struct {
	Limit    int
	WindowMs int64
	// Count is the entries inside the window, including this request's cost
	// when it was allowed.
	Count     int
	Remaining int
	// OldestMs is the oldest score inside the window, or -1 when it is empty.
	OldestMs int64
	// ResetMs is how long until the oldest entry slides out (0 when empty).
	ResetMs int64
	// Violated reports that this rule had no room for the request.
	Violated bool
	// RetryMs is, for a violated rule, the wait until it has room.
	RetryMs int64
}

// Bound is the binding rule's state.
func (d Decision) Bound() RuleState { return d.Rules[d.Binding] }

// Allow decides one request of the given cost for key under p and, when it is
// allowed, records it. It is exact under any concurrency.
func (l *Limiter) Allow(ctx context.Context, key string, p Policy, cost int) (Decision, error) {
	if err := ValidateKey(key); err != nil {
		return Decision{}, err
	}
	if cost < 1 || cost > p.SmallestLimit() {
		return Decision{}, ErrInvalidCost
	}
	member := uuid.NewString()
	args := make([]any, 0, 3+2*len(p.Rules))
	args = append(args, cost, member, MaxEvict)
	for _, r := range p.Rules {
		args = append(args, r.Limit, r.WindowMs())
	}
	var res []int64
	var err error
	if l.batch != nil {
		res, err = l.batch.run(ctx, RedisKey(key, p.Name), args)
	} else {
		res, err = checkScript.Run(ctx, l.rdb, []string{RedisKey(key, p.Name)}, args...).Int64Slice()
	}
	if err != nil {
		return Decision{}, fmt.Errorf("failed to run the check script: %w", err)
	}
	if len(res) != 2+3*len(p.Rules) {
		return Decision{}, fmt.Errorf("failed to read the check script's reply: %d values", len(res))
	}
	return decide(key, p, cost, member, res), nil
}

// decide turns the script's reply into a Decision.
func decide(key string, p Policy, cost int, member string, res []int64) Decision {
	d := Decision{
		Allowed: res[0] == 1,
		Key:     key,
		Policy:  p.Name,
		Cost:    cost,
		NowMs:   res[1],
		Rules:   make([]RuleState, len(p.Rules)),
	}
	if d.Allowed {
		d.ID = member
	}
	for i, r := range p.Rules {
		count, oldest, retry := int(res[2+3*i]), res[3+3*i], res[4+3*i]
		if d.Allowed {
			count += cost
			if oldest < 0 {
				oldest = d.NowMs
			}
		}
		s := RuleState{
			Limit:     r.Limit,
			WindowMs:  r.WindowMs(),
			Count:     count,
			Remaining: max(0, r.Limit-count),
			OldestMs:  oldest,
			Violated:  !d.Allowed && retry > 0,
			RetryMs:   retry,
		}
		if oldest >= 0 {
			s.ResetMs = max(0, oldest+s.WindowMs-d.NowMs)
		}
		d.Rules[i] = s
		d.RetryAfterMs = max(d.RetryAfterMs, retry)
	}
	d.Binding = binding(d)
	return d
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
		case s.Remaining < b.Remaining || (s.Remaining == b.Remaining && s.WindowMs < b.WindowMs):
			best = i
		}
	}
	return best
}

// Entry is one recorded request in a log.
type Entry struct {
	ID string // the ZSET member
	Ms int64  // its score: arrival on Redis's clock
}

// Window is a snapshot of one log, taken without consuming anything.
type Window struct {
	Key    string
	Policy string
	// Entries are those inside the longest window, oldest first, at most
	// MaxSnapshot of them.
	Entries   []Entry
	Truncated bool
	// Count is the true number of entries inside the longest window.
	Count    int
	Limit    int // the longest window's limit
	WindowMs int64
	NowMs    int64
	// Rules holds each rule's state, in the policy's order.
	Rules []RuleState
}

// Window returns a snapshot of key's log under p on Redis's clock.
func (l *Limiter) Window(ctx context.Context, key string, p Policy) (Window, error) {
	if err := ValidateKey(key); err != nil {
		return Window{}, err
	}
	args := make([]any, 0, 1+len(p.Rules))
	args = append(args, MaxSnapshot)
	for _, r := range p.Rules {
		args = append(args, r.WindowMs())
	}
	raw, err := windowScript.Run(ctx, l.rdb, []string{RedisKey(key, p.Name)}, args...).Slice()
	if err != nil {
		return Window{}, fmt.Errorf("failed to run the window script: %w", err)
	}
	if len(raw) != 2+2*len(p.Rules) {
		return Window{}, fmt.Errorf("failed to read the window script's reply: %d values", len(raw))
	}
	return snapshot(key, p, raw)
}

func snapshot(key string, p Policy, raw []any) (Window, error) {
	now, _ := raw[0].(int64)
	pairs, _ := raw[1].([]any)
	w := Window{Key: key, Policy: p.Name, NowMs: now, Entries: make([]Entry, 0, len(pairs)/2)}
	for i := 0; i+1 < len(pairs); i += 2 {
		id, _ := pairs[i].(string)
		score, _ := pairs[i+1].(string)
		ms, err := strconv.ParseFloat(score, 64)
		if err != nil {
			return Window{}, fmt.Errorf("failed to read score %q: %w", score, err)
		}
		w.Entries = append(w.Entries, Entry{ID: id, Ms: int64(ms)})
	}
	longest := 0
	for i, r := range p.Rules {
		count, _ := raw[2+2*i].(int64)
		oldest, _ := raw[3+2*i].(int64)
		s := RuleState{Limit: r.Limit, WindowMs: r.WindowMs(), Count: int(count), Remaining: max(0, r.Limit-int(count)), OldestMs: oldest}
		if oldest >= 0 {
			s.ResetMs = max(0, oldest+s.WindowMs-now)
		}
		w.Rules = append(w.Rules, s)
		if s.WindowMs > w.Rules[longest].WindowMs {
			longest = i
		}
	}
	lr := w.Rules[longest]
	w.Count, w.Limit, w.WindowMs = lr.Count, lr.Limit, lr.WindowMs
	w.Truncated = w.Count > len(w.Entries)
	return w, nil
}

// Reset deletes key's log under p: the client starts afresh.
func (l *Limiter) Reset(ctx context.Context, key string, p Policy) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := l.rdb.Del(ctx, RedisKey(key, p.Name)).Err(); err != nil {
		return fmt.Errorf("failed to reset the window: %w", err)
	}
	return nil
}
