package limiter

import (
	_ "embed"
	"fmt"
	"time"

	"github.com/ratescope/ratescope/internal/redisdata"
)

// Calendar quotas (Rule.Period) are decided by every decision script, in
// the same run as the rules (quota.lua): a policy with quotas passes, after
// its state's key (and its lock's), the counters of three periods per quota
// — the one holding the server's now and its neighbours — and, before the
// lock's base time, each quota's limit and those periods' bounds. Which of
// them holds now follows Redis's clock: the script picks. The reply adds
// quotaValues numbers per quota after the rules'.

//go:embed quota.lua
var quotaSrc string

// quotaValues is how many numbers a script returns per quota: the count
// before the request, the period's start and end, retryMs and retry1Ms.
const quotaValues = 5

// quotaMargin is how long a quota's counter outlives its period, as
// quota.lua sets it: nothing reads it after the period's end on Redis's
// clock, but a replica promoted by a failover may run a little behind.
const quotaMargin = time.Minute

// calendar is the moment the server computes quota periods around: its own
// clock, which need only be within a period of Redis's, since the script
// picks the period by Redis's. Tests shift it to reach a period's end
// without waiting for it.
type calendar struct {
	now func() time.Time
	// shift is what the calendar adds to Redis's clock: the periods are
	// computed around now()+shift and handed to Redis shifted back, so a
	// period ends for Redis shift earlier than its local midnight. 0 but
	// in tests.
	shift time.Duration
}

// quotaCall is what a policy's quotas add to a script call: nil when it has
// none.
type quotaCall struct {
	keys []string
	args []any
}

// quotaKey names the counter of key's quota of period pd under p for the
// period starting at startMs: a policy's only quota has the plain name, and
// several are told apart by their periods (redisdata.QuotaKey).
func quotaKey(key string, p Policy, pd Period, startMs int64) string {
	quotas := 0
	for _, r := range p.Rules {
		if r.Period != "" {
			quotas++
		}
	}
	if quotas == 1 {
		pd = ""
	}
	return redisdata.QuotaKey(key, p.Name, string(pd), startMs)
}

// quotaCall computes key's quota counters and periods under p, around the
// calendar's now; zero when p has no quotas.
func (l *Limiter) quotaCall(key string, p Policy) (quotaCall, error) {
	if !p.HasQuotas() {
		return quotaCall{}, nil
	}
	loc, err := p.Location()
	if err != nil {
		return quotaCall{}, fmt.Errorf("failed to place policy %q's quotas: %w", p.Name, err)
	}
	now := time.Now()
	if l.cal.now != nil {
		now = l.cal.now()
	}
	now = now.Add(l.cal.shift)
	var q quotaCall
	for _, r := range p.Rules {
		if r.Period == "" {
			continue
		}
		if r.Period.order() < 0 { // a Policy built by hand; ParsePolicy refuses it
			return quotaCall{}, fmt.Errorf("failed to place policy %q's quotas: period %q is not day, week or month", p.Name, r.Period)
		}
		s := r.Period.starts(now, loc)
		q.args = append(q.args, r.Limit)
		for i, t := range s {
			if i < 3 {
				q.keys = append(q.keys, quotaKey(key, p, r.Period, t.UnixMilli()))
			}
			q.args = append(q.args, t.Add(-l.cal.shift).UnixMilli())
		}
	}
	return q, nil
}

// withExtras adds p's quotas and lock to a decision script's keys (the
// state's first) and arguments, as lock.lua and quota.lua read them: keys
// state, lock, quotas; arguments the script's, quotas, lock.
func withExtras(keys []string, args []any, key string, p Policy, q quotaCall) ([]string, []any) {
	if p.Lock > 0 {
		keys = append(keys, redisdata.LockKey(key, p.Name))
	}
	keys = append(keys, q.keys...)
	args = append(args, q.args...)
	if p.Lock > 0 {
		args = append(args, p.Lock.Milliseconds())
	}
	return keys, args
}

// windowRules counts p's sliding-window rules: the ones a script's own
// arguments carry.
func windowRules(p Policy) int {
	n := 0
	for _, r := range p.Rules {
		if r.Period == "" {
			n++
		}
	}
	return n
}

// quotaRules counts p's quota rules.
func quotaRules(p Policy) int { return len(p.Rules) - windowRules(p) }

// fillQuotas reads what a script reported of p's quotas (v, quotaValues
// per quota, in the policy's order) into their places in rules and, when
// denied, retry1. added is the cost the request added (0 unless it was
// recorded); denied marks a decision that refused it.
func fillQuotas(rules []RuleState, retry1 []int64, p Policy, nowMs int64, v []int64, added int, denied bool) {
	j := 0
	for i, r := range p.Rules {
		if r.Period == "" {
			continue
		}
		q := v[quotaValues*j:]
		j++
		count, start, end, retry := int(q[0])+added, q[1], q[2], q[3]
		if retry1 != nil {
			retry1[i] = q[4]
		}
		rules[i] = RuleState{
			Limit:     r.Limit,
			Period:    r.Period,
			PeriodMs:  end - start,
			Count:     count,
			Remaining: max(0, r.Limit-count),
			OldestMs:  -1,
			ResetMs:   max(0, end-nowMs),
			Violated:  denied && retry > 0,
			RetryMs:   retry,
		}
	}
}

// quotaKeys are key's quota counters under p around now: what a reset
// deletes.
func (l *Limiter) quotaKeys(key string, p Policy) []string {
	q, err := l.quotaCall(key, p)
	if err != nil {
		return nil
	}
	return q.keys
}
