package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
)

var (
	//go:embed adjust.lua
	adjustSrc string
	//go:embed refund.lua
	refundSrc string
	//go:embed settle.lua
	settleSrc    string
	refundScript = newScript(lockSrc + quotaSrc + adjustSrc + refundSrc)
	settleScript = newScript(lockSrc + quotaSrc + adjustSrc + settleSrc)
)

// ErrNotLog is returned by Refund and Settle for a policy of another
// algorithm than the log: only the log keeps each check's entries, under
// its id.
var ErrNotLog = errors.New("only a log policy keeps each check's entries: refunds and settles need algorithm log")

// ErrInvalidID is returned for an id that is not one a check answers with:
// a UUID in its 36-character form.
var ErrInvalidID = errors.New("id must be the id an allowed check answered with: a UUID such as 9b2f1c4e-3a5d-4e6f-8a7b-0c1d2e3f4a5b")

// ErrInvalidSettle is returned for a settled cost below 0 or above the
// policy's MaxCost.
var ErrInvalidSettle = errors.New("cost must be from 0 to the policy's largest cost: its smallest limit, and at most 1000 for log")

// checkID is the form of a check's id: a UUID as uuid.NewString writes it.
var checkID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// ValidateID reports ErrInvalidID unless id has the form of the id an
// allowed check answers with, the form Refund and Settle take. A caller
// that validates its input before anything else (an HTTP handler naming
// each bad field) asks here rather than learning it from the call.
func ValidateID(id string) error {
	if !checkID.MatchString(id) {
		return ErrInvalidID
	}
	return nil
}

// Adjustment is what Refund or Settle did to the entries one check recorded,
// and the policy's rules after it.
//
// Example: demo=5/10s holds five entries, one of them the check c of cost
// 2 (c and c:1). Refund(c): Was 2, Now 0, the rule's Count 3, Remaining 2.
// Settle(c, 4) instead: Was 2, Now 4, Count 7, Remaining 0 — a debt of two
// that the next checks wait out until enough entries slide out.
type Adjustment struct {
	Key, Policy, ID string
	// Was is how many entries of the check the log held (inside the longest
	// window): 0 when none is left — slid out, refunded, settled to 0, or
	// never recorded — and then nothing changed. Now is how many it holds
	// after: 0 after a refund, the settled cost after a settle that found
	// any.
	Was, Now int
	// NowMs is Redis's clock when the script ran.
	NowMs int64
	// Rules holds each rule's state after: Count, Remaining, OldestMs,
	// ResetMs (Count may exceed Limit after a settle to more). A quota
	// rule's counter is as the check left it: refunds and settles change
	// the log's entries, and a quota counts every allowed check.
	Rules []RuleState
	// Binding indexes the rule with the least remaining (tie: the shorter
	// window), as for an allowed check.
	Binding int
}

// Bound is the binding rule's state.
func (a Adjustment) Bound() RuleState { return a.Rules[a.Binding] }

// Refund takes back every entry the check id recorded under key and p, as
// if it had never been allowed, in one script: idempotent (a second refund
// finds nothing, Was 0), never an error for an id that is gone. A refund
// that frees room drops that window's cached denials on every instance.
// Exact under any concurrency: the entries held the room from the moment of
// the check until the refund.
func (l *Limiter) Refund(ctx context.Context, key string, p Policy, id string) (Adjustment, error) {
	return l.adjust(ctx, refundScript, key, p, id, 0)
}

// Settle makes the cost the check id recorded under key and p be cost (0 to
// p.MaxCost()): fewer entries — the highest-numbered go — or more, added at
// the check's own score, even when that overfills a window (a debt later
// checks wait out exactly); a settle is never denied. A check with no entry
// left changes nothing (Was 0, Now 0).
func (l *Limiter) Settle(ctx context.Context, key string, p Policy, id string, cost int) (Adjustment, error) {
	if cost < 0 || cost > p.MaxCost() {
		return Adjustment{}, ErrInvalidSettle
	}
	return l.adjust(ctx, settleScript, key, p, id, cost)
}

func (l *Limiter) adjust(ctx context.Context, s *redis.Script, key string, p Policy, id string, cost int) (Adjustment, error) {
	if err := ValidateKey(key); err != nil {
		return Adjustment{}, err
	}
	if p.AlgorithmName() != Log {
		return Adjustment{}, ErrNotLog
	}
	if err := ValidateID(id); err != nil {
		return Adjustment{}, err
	}
	q, err := l.quotaCall(key, p)
	if err != nil {
		return Adjustment{}, err
	}
	args := make([]any, 0, 4+2*len(p.Rules)+len(q.args))
	args = append(args, id, l.resets, p.Name+" "+key, cost)
	for _, r := range p.Rules {
		if r.Period == "" {
			args = append(args, r.Limit, r.WindowMs())
		}
	}
	keys := append([]string{redisdata.LogKey(key, p.Name)}, q.keys...)
	args = append(args, q.args...)
	nw := windowRules(p)
	res, err := l.eval(ctx, 0, s, keys, args)
	if err == nil && len(res) != 3+2*nw+quotaValues*(len(p.Rules)-nw) {
		err = fmt.Errorf("%d values", len(res))
	}
	if err != nil {
		return Adjustment{}, fmt.Errorf("failed to run the adjusting script: %w", err)
	}
	a := Adjustment{Key: key, Policy: p.Name, ID: id, Was: int(res[0]), Now: int(res[1]), NowMs: res[2], Rules: make([]RuleState, len(p.Rules))}
	if a.Was != a.Now && l.cache != nil {
		// This instance at once; the others as the script's announcement arrives.
		l.cache.invalidate(cacheKey{key: key, policy: p.Name})
	}
	at := 3 // the next window rule's place in the reply
	for i, r := range p.Rules {
		if r.Period != "" {
			continue
		}
		count, oldest := int(res[at]), res[at+1]
		at += 2
		st := RuleState{Limit: r.Limit, WindowMs: r.WindowMs(), Count: count, Remaining: max(0, r.Limit-count), OldestMs: oldest}
		if oldest >= 0 {
			st.ResetMs = max(0, oldest+st.WindowMs-a.NowMs)
		}
		a.Rules[i] = st
	}
	fillQuotas(a.Rules, nil, p, a.NowMs, res[at:], 0, false)
	for i := range a.Rules {
		a.Rules[i].RetryMs = 0
	}
	a.Binding = binding(Decision{Allowed: true, Rules: a.Rules})
	return a, nil
}
