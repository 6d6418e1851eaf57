package limiter

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
)

//go:embed state.lua
var stateSrc string

// newStateScript is an algorithm's script: state.lua, which reads the clock
// and runs the rules, followed by the algorithm's own file.
func newStateScript(src string) *redis.Script {
	return newScript(lockSrc + quotaSrc + stateSrc + "\n" + src)
}

// stateValues is how many numbers the state scripts return per rule: used,
// resetMs, retryMs, retry1Ms and three of the algorithm's own.
const stateValues = 7

// stateAlgorithm is an algorithm that keeps a few numbers per rule in one
// hash (fixed, counter, gcra, bucket). The script decides; the Go side only
// reads the reply. A look without deciding is the same script with cost 0,
// so a Window never disagrees with a decision about what the state means.
type stateAlgorithm struct {
	name   Algorithm
	script *redis.Script
	// describe fills the algorithm's own field of s from the script's three
	// state numbers, at nowMs.
	describe func(s *RuleState, nowMs int64, raw [3]int64)
	// counts: the script can count denied requests too (Policy.CountDenied).
	counts bool
}

func (a stateAlgorithm) countsDenied() bool { return a.counts }

// State is an algorithm's own state of one rule, in RuleState: *FixedState,
// *CounterState, *GCRAState or *BucketState. Its JSON is its wire form, sent
// by ratescope's live view and window API as a member named for Algorithm.
type State interface {
	Algorithm() Algorithm
}

// round3 keeps three decimals: enough for a fraction of a token or a ms, and
// readable in JSON.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// What the state scripts record (their ARGV[2]).
const (
	recordNothing = 0 // a peek, or a look at the state
	recordAllowed = 1 // an allowed request's cost
	recordAll     = 2 // the cost, allowed or not (Policy.CountDenied)
)

func (a stateAlgorithm) args(key string, p Policy, cost, record int) (string, []any) {
	args := make([]any, 0, 2+2*len(p.Rules)+6*quotaRules(p)+1)
	args = append(args, cost, record)
	for _, r := range p.Rules {
		if r.Period == "" {
			args = append(args, r.Limit, r.WindowMs())
		}
	}
	return redisdata.StateKey(key, p.Name, string(a.name)), args
}

// read parses the script's reply to a decision (decided) or a look, without
// the lock's numbers; record is what the script was told to record of cost.
// When a decision's request was denied it also returns each rule's wait
// until a request of cost 1 fits.
func (a stateAlgorithm) read(p Policy, cost, record int, decided bool, res []int64) (bool, int64, []RuleState, []int64, error) {
	nw := windowRules(p)
	if len(res) != 2+stateValues*nw+quotaValues*(len(p.Rules)-nw) {
		return false, 0, nil, nil, fmt.Errorf("failed to read the %s script's reply: %d values", a.name, len(res))
	}
	allowed, now := res[0] == 1, res[1]
	rules := make([]RuleState, len(p.Rules))
	var retry1 []int64
	if decided && !allowed {
		retry1 = make([]int64, len(p.Rules))
	}
	w := 0 // the window rules' place in the reply
	for i, r := range p.Rules {
		if r.Period != "" {
			continue
		}
		v := res[2+stateValues*w:]
		w++
		used, reset, retry := int(v[0]), v[1], v[2]
		if retry1 != nil {
			retry1[i] = v[3]
		}
		rules[i] = RuleState{
			Limit:     r.Limit,
			WindowMs:  r.WindowMs(),
			Count:     used,
			Remaining: max(0, r.Limit-used),
			OldestMs:  -1,
			ResetMs:   reset,
			Violated:  decided && !allowed && retry > 0,
			RetryMs:   retry,
		}
		a.describe(&rules[i], now, [3]int64{v[4], v[5], v[6]})
	}
	added := 0 // what the quotas' counters took: the script reports them before
	if (record == recordAllowed && allowed) || record == recordAll {
		added = cost
	}
	fillQuotas(rules, retry1, p, now, res[2+stateValues*w:], added, decided && !allowed)
	return allowed, now, rules, retry1, nil
}

func (a stateAlgorithm) allow(ctx context.Context, l *Limiter, roundTrip time.Duration, key string, p Policy, cost int, peek bool) (Decision, []int64, error) {
	q, err := l.quotaCall(key, p)
	if err != nil {
		return Decision{}, nil, err
	}
	c := a.prepare(key, p, cost, peek, q)
	res, err := l.eval(ctx, roundTrip, c.script, c.keys, c.args)
	if err != nil {
		return Decision{}, nil, fmt.Errorf("failed to run the %s script: %w", a.name, err)
	}
	return c.decide(res)
}

func (a stateAlgorithm) prepare(key string, p Policy, cost int, peek bool, q quotaCall) prepared {
	record := recordAllowed
	switch {
	case peek:
		record = recordNothing
	case p.CountDenied && a.counts:
		record = recordAll
	}
	k, args := a.args(key, p, cost, record)
	keys, args := withExtras([]string{k}, args, key, p, q)
	return prepared{
		script: a.script,
		keys:   keys,
		args:   args,
		decide: func(res []int64) (Decision, []int64, error) {
			n := max(0, len(res)-lockValues(p)) // the lock's numbers come last
			allowed, now, rules, retry1, err := a.read(p, cost, record, true, res[:n])
			if err != nil {
				return Decision{}, nil, err
			}
			d := Decision{Allowed: allowed, Key: key, Policy: p.Name, Algorithm: a.name, Cost: cost, NowMs: now, Rules: rules, Peek: peek}
			if allowed && !peek {
				d.ID = uuid.NewString()
			}
			for _, r := range rules {
				if r.Violated {
					d.RetryAfterMs = max(d.RetryAfterMs, r.RetryMs)
				}
			}
			d.Binding = binding(d)
			applyLock(&d, retry1, res[n:])
			return d, retry1, nil
		},
	}
}

// look runs the script with cost 0, recording nothing: a look at the state.
func (a stateAlgorithm) look(key string, p Policy, q quotaCall) lookup {
	k, args := a.args(key, p, 0, recordNothing)
	keys, args := withExtras([]string{k}, args, key, Policy{Name: p.Name}, q)
	return lookup{script: a.script, keys: keys, args: args, read: func(reply any) (Window, error) {
		res, err := int64s(reply)
		if err != nil {
			return Window{}, fmt.Errorf("failed to read the %s script's reply: %w", a.name, err)
		}
		_, now, rules, _, err := a.read(p, 0, recordNothing, false, res)
		if err != nil {
			return Window{}, err
		}
		for i := range rules {
			rules[i].RetryMs = 0
		}
		return Window{Key: key, Policy: p.Name, Algorithm: a.name, NowMs: now, Rules: rules}, nil
	}}
}

// int64s reads a script's reply that is an array of integers.
func int64s(reply any) ([]int64, error) {
	raw, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("got %T, want an array", reply)
	}
	out := make([]int64, len(raw))
	for i, v := range raw {
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("value %d is %T, want an integer", i, v)
		}
		out[i] = n
	}
	return out, nil
}
