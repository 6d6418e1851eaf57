package limiter

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/redisdata"
)

var (
	//go:embed lock.lua
	lockSrc string
	//go:embed check.lua
	checkSrc    string
	checkScript = newScript(lockSrc + quotaSrc + checkSrc)

	//go:embed window.lua
	windowSrc    string
	windowScript = newScript(lockSrc + quotaSrc + windowSrc)
)

// Log is the sliding-window log (SPEC §2): one sorted-set entry per allowed
// request, scored by its arrival on Redis's clock; exact over any window. The
// default.
const Log Algorithm = "log"

func init() {
	register(0, Descriptor{
		Name:     Log,
		Title:    "Sliding-window log",
		Caption:  "Sliding-window log: one sorted-set entry per allowed request, scored by Redis time; exact.",
		Tradeoff: "Keeps the time of every allowed request, so no window of the rule's length ever holds more than the limit: exact, at one sorted-set entry per request.",
		// An entry per allowed request, each unit of a cost added in one
		// script: both bounded so no window or check holds Redis for long.
		ExactLimit: MaxLogLimit,
		MaxCost:    MaxLogCost,
		Entries:    true,
		Steps:      parseSteps(checkSrc),
	}, logAlgorithm{})
	redisdata.CheckScript = lockSrc + quotaSrc + checkSrc
}

// logAlgorithm is the sliding-window log: one sorted set per client and
// policy, one entry per allowed request.
type logAlgorithm struct{}

func (logAlgorithm) countsDenied() bool { return false }

func (a logAlgorithm) allow(ctx context.Context, l *Limiter, roundTrip time.Duration, key string, p Policy, cost int, peek bool) (Decision, []int64, error) {
	return a.decide(ctx, l, roundTrip, key, p, cost, peek, noBooking)
}

// decide is allow that may book a slot up to waitMs ahead (noBooking:
// none), as the check script books it.
func (a logAlgorithm) decide(ctx context.Context, l *Limiter, roundTrip time.Duration, key string, p Policy, cost int, peek bool, waitMs int64) (Decision, []int64, error) {
	q, err := l.quotaCall(key, p)
	if err != nil {
		return Decision{}, nil, err
	}
	c := a.prepareWait(key, p, cost, peek, q, waitMs)
	res, err := l.eval(ctx, roundTrip, c.script, c.keys, c.args)
	if err != nil {
		return Decision{}, nil, fmt.Errorf("failed to run the check script: %w", err)
	}
	return c.decide(res)
}

// noBooking is the waitMs of a check that books nothing: its call carries
// no wait, and the script's reply no bookedMs.
const noBooking = -1

func (a logAlgorithm) prepare(key string, p Policy, cost int, peek bool, q quotaCall) prepared {
	return a.prepareWait(key, p, cost, peek, q, noBooking)
}

// prepareWait is prepare for a check that may book a slot up to waitMs
// ahead; noBooking leaves the call as every other check's.
func (logAlgorithm) prepareWait(key string, p Policy, cost int, peek bool, q quotaCall, waitMs int64) prepared {
	member := "" // a peek records nothing
	if !peek {
		member = uuid.NewString()
	}
	args := make([]any, 0, 4+2*len(p.Rules)+len(q.args)+1)
	args = append(args, cost, member, redisdata.MaxEvict)
	for _, r := range p.Rules {
		if r.Period == "" {
			args = append(args, r.Limit, r.WindowMs())
		}
	}
	booked := 0 // the reply's bookedMs
	if waitMs != noBooking {
		args = append(args, waitMs)
		booked = 1
	}
	keys, args := withExtras([]string{redisdata.LogKey(key, p.Name)}, args, key, p, q)
	nw, nq := windowRules(p), quotaRules(p)
	return prepared{
		script: checkScript,
		keys:   keys,
		args:   args,
		decide: func(res []int64) (Decision, []int64, error) {
			if len(res) != 2+logValues*nw+quotaValues*nq+lockValues(p)+booked {
				return Decision{}, nil, fmt.Errorf("failed to read the check script's reply: %d values", len(res))
			}
			var bookedMs int64
			if booked == 1 {
				bookedMs = res[len(res)-1]
			}
			d, retry1 := decideLog(key, p, cost, member, res, bookedMs)
			applyLock(&d, retry1, res[2+logValues*nw+quotaValues*nq:len(res)-booked])
			return d, retry1, nil
		},
	}
}

// logValues is how many numbers the check script returns per rule: count,
// oldestMs, retryMs, retry1Ms.
const logValues = 4

// decideLog turns the check script's reply into a Decision and, when denied,
// each rule's wait until it has room for a request of cost 1 (nil when
// allowed). An empty member is a peek's: nothing was recorded. bookedMs is
// the score the request was booked at, 0 when it was not: then the rules'
// states are those of their windows at that moment, as the script
// reported them.
func decideLog(key string, p Policy, cost int, member string, res []int64, bookedMs int64) (Decision, []int64) {
	d := Decision{
		Allowed:   res[0] == 1,
		Key:       key,
		Policy:    p.Name,
		Algorithm: Log,
		Cost:      cost,
		NowMs:     res[1],
		BookedMs:  bookedMs,
		Rules:     make([]RuleState, len(p.Rules)),
		Peek:      member == "",
	}
	// at is the moment the rules describe: now, or the booked slot.
	at := d.NowMs
	if bookedMs > 0 {
		at = bookedMs
	}
	recorded := d.Allowed && !d.Peek
	var retry1 []int64
	switch {
	case recorded:
		d.ID = member
	case !d.Allowed:
		retry1 = make([]int64, len(p.Rules))
	}
	w := 0 // the window rules' place in the reply
	for i, r := range p.Rules {
		if r.Period != "" {
			continue
		}
		v := res[2+logValues*w:]
		w++
		count, oldest, retry := int(v[0]), v[1], v[2]
		if retry1 != nil {
			retry1[i] = v[3]
		}
		if recorded {
			count += cost
			if oldest < 0 {
				oldest = at
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
			s.ResetMs = max(0, oldest+s.WindowMs-at)
		}
		d.Rules[i] = s
	}
	added := 0
	if recorded {
		added = cost
	}
	fillQuotas(d.Rules, retry1, p, at, res[2+logValues*w:], added, !d.Allowed)
	for _, s := range d.Rules {
		d.RetryAfterMs = max(d.RetryAfterMs, s.RetryMs)
	}
	d.Binding = binding(d)
	return d, retry1
}

func (logAlgorithm) look(key string, p Policy, q quotaCall) lookup {
	args := make([]any, 0, 1+len(p.Rules)+len(q.args))
	args = append(args, MaxSnapshot)
	for _, r := range p.Rules {
		if r.Period == "" {
			args = append(args, r.WindowMs())
		}
	}
	keys := append([]string{redisdata.LogKey(key, p.Name)}, q.keys...)
	args = append(args, q.args...)
	nw, nq := windowRules(p), quotaRules(p)
	return lookup{script: windowScript, keys: keys, args: args, read: func(reply any) (Window, error) {
		raw, ok := reply.([]any)
		if !ok || len(raw) != 2+2*nw+quotaValues*nq {
			return Window{}, fmt.Errorf("failed to read the window script's reply: %T of %d values", reply, len(raw))
		}
		return logSnapshot(key, p, raw)
	}}
}

// logSnapshot reads the window script's reply; the lookup checked its
// length.
func logSnapshot(key string, p Policy, raw []any) (Window, error) {
	now, _ := raw[0].(int64)
	pairs, _ := raw[1].([]any)
	w := Window{Key: key, Policy: p.Name, Algorithm: Log, NowMs: now, Entries: make([]Entry, 0, len(pairs)/2)}
	for i := 0; i+1 < len(pairs); i += 2 {
		id, _ := pairs[i].(string)
		score, _ := pairs[i+1].(string)
		ms, err := strconv.ParseFloat(score, 64)
		if err != nil {
			return Window{}, fmt.Errorf("failed to read score %q: %w", score, err)
		}
		w.Entries = append(w.Entries, Entry{ID: id, Ms: int64(ms)})
	}
	w.Rules = make([]RuleState, len(p.Rules))
	at := 2 // the next window rule's place in the reply
	for i, r := range p.Rules {
		if r.Period != "" {
			continue
		}
		count, _ := raw[at].(int64)
		oldest, _ := raw[at+1].(int64)
		at += 2
		s := RuleState{Limit: r.Limit, WindowMs: r.WindowMs(), Count: int(count), Remaining: max(0, r.Limit-int(count)), OldestMs: oldest}
		if oldest >= 0 {
			s.ResetMs = max(0, oldest+s.WindowMs-now)
		}
		w.Rules[i] = s
	}
	qs, err := int64s(raw[at:])
	if err != nil {
		return Window{}, fmt.Errorf("failed to read the window script's quotas: %w", err)
	}
	fillQuotas(w.Rules, nil, p, now, qs, 0, false)
	for i := range w.Rules {
		w.Rules[i].RetryMs = 0
	}
	return w, nil
}
