package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
)

// The outcomes phase (--outcomes) measures what taking back or resizing a
// check costs beside the check itself: Limiter.Refund and Limiter.Settle
// against Limiter.Allow, in this process, through one limiter as the server
// runs it (batched, its deny cache following the resets channel, so every
// refund or settle that changes a log announces it to one subscriber). It
// runs on a redis-server of its own (unless --redis-url is given), so that
// INFO's counters hold this phase's work only. Per call, from --conns
// concurrent callers:
//
//   - calls/s;
//   - script µs: what INFO commandstats adds to EVALSHA's (and EVAL's) usec,
//     divided by its calls — the script's own run time, I/O excluded;
//   - CPU µs: redis-server's CPU (INFO cpu, user + sys) divided by the calls.
//
// Each is also given as a ratio to the check's in the same round. Every
// round runs on fresh keys (--keys of them) under each of outcomePolicies:
// first, untimed, checks record the ids the refunds and settles take (cost 1,
// and cost 2 for settles to fewer); then the variants take turns, each
// --duration / --rounds long — a check (cost 1, allowed), a refund (each
// recorded id once: one entry taken back), a refund of an id the refunds
// already took back (nothing changes, nothing is announced), a settle from
// cost 1 to 2 (one entry added) and one from 2 to 1 (one entry removed) — so
// every variant changes one entry of logs of the same sizes.
var outcomePolicies = []string{"out1=1000/1h", "out2=1000/1h,10000/24h"}

// outcomeHeadroom is how many times more ids a round records for a variant
// than it did in a round's time at its fastest so far (or the warm-up's
// checks): a variant that runs out ends its round early, and the report says
// so.
const outcomeHeadroom = 1.5

// recorded is an allowed check whose entries a refund or settle takes.
type recorded struct{ key, id string }

// outcomeVariant is one kind of call the phase times.
type outcomeVariant struct {
	name string
	// recordCost > 0: each round first records that many ids of checks of
	// this cost for the variant, each of which it takes once.
	recordCost int
	// reuses names the variant whose taken ids this one cycles through.
	reuses string
	call   func(ctx context.Context, lim *limiter.Limiter, p limiter.Policy, key string, r recorded) error
	best   float64 // calls/s, the most in one round so far
}

// outcomeFigures accumulates one (policy, variant)'s rounds.
type outcomeFigures struct {
	rates, usec, cpu []float64
	short            int // rounds that ran out of recorded ids early
}

func outcomeVariants() []*outcomeVariant {
	adjusted := func(what string, was, now int, a limiter.Adjustment, err error) error {
		if err != nil {
			return fmt.Errorf("failed to %s: %w", what, err)
		}
		if a.Was != was || a.Now != now {
			return fmt.Errorf("a %s of %s found %d entries and left %d, not %d and %d", what, a.ID, a.Was, a.Now, was, now)
		}
		return nil
	}
	return []*outcomeVariant{
		{name: "check", call: func(ctx context.Context, lim *limiter.Limiter, p limiter.Policy, key string, _ recorded) error {
			d, err := lim.Allow(ctx, key, p, 1)
			if err == nil && !d.Allowed {
				err = errors.New("a check was denied: --keys is too few for the load")
			}
			return err
		}},
		{name: "refund", recordCost: 1, call: func(ctx context.Context, lim *limiter.Limiter, p limiter.Policy, _ string, r recorded) error {
			a, err := lim.Refund(ctx, r.key, p, r.id)
			return adjusted("refund", 1, 0, a, err)
		}},
		{name: "refund, already gone", reuses: "refund", call: func(ctx context.Context, lim *limiter.Limiter, p limiter.Policy, _ string, r recorded) error {
			a, err := lim.Refund(ctx, r.key, p, r.id)
			return adjusted("refund", 0, 0, a, err)
		}},
		{name: "settle to more, 1 → 2", recordCost: 1, call: func(ctx context.Context, lim *limiter.Limiter, p limiter.Policy, _ string, r recorded) error {
			a, err := lim.Settle(ctx, r.key, p, r.id, 2)
			return adjusted("settle", 1, 2, a, err)
		}},
		{name: "settle to fewer, 2 → 1", recordCost: 2, call: func(ctx context.Context, lim *limiter.Limiter, p limiter.Policy, _ string, r recorded) error {
			a, err := lim.Settle(ctx, r.key, p, r.id, 1)
			return adjusted("settle", 2, 1, a, err)
		}},
	}
}

// outcomeRun is the phase's state: its Redis, its limiter, its variants.
type outcomeRun struct {
	o        options
	rdb      *redis.Client
	lim      *limiter.Limiter
	variants []*outcomeVariant
	warm     float64 // checks/s of the warm-up
}

func measureOutcomes(ctx context.Context, e *env) error {
	o := e.o
	rdb, redisNote, done, err := e.phaseRedis(ctx, "outcomes", max(o.conns, 10))
	if err != nil {
		return err
	}
	defer done()
	r := &outcomeRun{o: o, rdb: rdb, lim: limiter.New(rdb), variants: outcomeVariants()}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() { _ = r.lim.Run(runCtx) }() // nil when runCtx ends: nothing to report

	policies := make([]limiter.Policy, len(outcomePolicies))
	for i, s := range outcomePolicies {
		if policies[i], err = limiter.ParsePolicy(s); err != nil {
			return fmt.Errorf("failed to parse policy %s: %w", s, err)
		}
	}
	if err := r.warmUp(ctx, policies); err != nil {
		return err
	}
	figs := make([][]*outcomeFigures, len(policies))
	for pi, p := range policies {
		for range r.variants {
			figs[pi] = append(figs[pi], &outcomeFigures{})
		}
		progress("  %s: %d rounds of %s per variant", outcomePolicies[pi], o.rounds, o.slice())
		for range o.rounds {
			if err := r.round(ctx, p, figs[pi]); err != nil {
				return fmt.Errorf("%s: %w", outcomePolicies[pi], err)
			}
		}
	}
	r.report(e.rep, redisNote, figs)
	return nil
}

// warmUp runs checks for a second, which also tells how many ids the first
// round records, and one refund and one settle of ids nobody recorded, so
// that Redis holds every script before anything is timed.
func (r *outcomeRun) warmUp(ctx context.Context, policies []limiter.Policy) error {
	prefix := "out-warm-" + uuid.NewString()[:8] + "-"
	p := policies[0]
	check := r.variants[0]
	rate, err := forDuration(ctx, r.o.conns, time.Second, func(ctx context.Context, i int64) (int, error) {
		return 1, check.call(ctx, r.lim, p, prefix+strconv.FormatInt(i%int64(r.o.keys), 10), recorded{})
	})
	if err != nil {
		return fmt.Errorf("failed to warm up: %w", err)
	}
	r.warm = rate
	if _, err := r.lim.Refund(ctx, prefix+"0", p, uuid.NewString()); err != nil {
		return fmt.Errorf("failed to warm up: %w", err)
	}
	if _, err := r.lim.Settle(ctx, prefix+"0", p, uuid.NewString(), 1); err != nil {
		return fmt.Errorf("failed to warm up: %w", err)
	}
	return unlinkPrefix(ctx, r.rdb, prefix)
}

// round records the ids the round's refunds and settles take, runs every
// variant once on the same fresh keys, adds its figures to figs and deletes
// the keys.
func (r *outcomeRun) round(ctx context.Context, p limiter.Policy, figs []*outcomeFigures) error {
	o := r.o
	prefix := "out-" + uuid.NewString()[:8] + "-"
	keyOf := func(i int64) string { return prefix + strconv.FormatInt(i%int64(o.keys), 10) }
	pools := map[string][]recorded{}
	for _, v := range r.variants {
		if v.recordCost == 0 {
			continue
		}
		n := int64(outcomeHeadroom*max(r.warm, v.best)*o.slice().Seconds()) + 1
		ids, err := r.record(ctx, p, n, v.recordCost, keyOf)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		pools[v.name] = ids
	}
	for vi, v := range r.variants {
		pool := pools[v.name]
		if v.reuses != "" {
			if pool = pools[v.reuses]; len(pool) == 0 {
				return fmt.Errorf("%s: the %s variant took no ids", v.name, v.reuses)
			}
		}
		var used atomic.Int64
		call := func(ctx context.Context, i int64) (int, error) {
			i-- // forDuration counts from 1
			var rec recorded
			switch {
			case v.reuses != "":
				rec = pool[i%int64(len(pool))]
			case v.recordCost > 0:
				if i >= int64(len(pool)) {
					return 0, errDone
				}
				rec = pool[i]
			}
			if err := v.call(ctx, r.lim, p, keyOf(i), rec); err != nil {
				return 0, err
			}
			used.Add(1)
			return 1, nil
		}
		before, err := readScriptCounters(ctx, r.rdb)
		if err != nil {
			return err
		}
		rate, err := forDuration(ctx, o.conns, o.slice(), call)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		after, err := readScriptCounters(ctx, r.rdb)
		if err != nil {
			return err
		}
		calls := after.calls["evalsha"] + after.calls["eval"] - before.calls["evalsha"] - before.calls["eval"]
		if calls <= 0 {
			return fmt.Errorf("%s: INFO commandstats counted no EVALSHA", v.name)
		}
		usec := after.usec["evalsha"] + after.usec["eval"] - before.usec["evalsha"] - before.usec["eval"]
		f := figs[vi]
		f.rates, f.usec, f.cpu = append(f.rates, rate), append(f.usec, usec/calls), append(f.cpu, (after.cpu-before.cpu)*1e6/calls)
		v.best = max(v.best, rate)
		if v.recordCost > 0 {
			// Indices are taken in order and every one taken below the
			// pool's end was called: the ids taken are a prefix.
			pools[v.name] = pool[:used.Load()]
			if used.Load() == int64(len(pool)) {
				f.short++
			}
		}
	}
	return unlinkPrefix(ctx, r.rdb, prefix)
}

// record makes n allowed checks of cost over the round's keys, round robin,
// from --conns callers, and returns their ids in order.
func (r *outcomeRun) record(ctx context.Context, p limiter.Policy, n int64, cost int, keyOf func(int64) string) ([]recorded, error) {
	ids := make([]recorded, n)
	_, err := forDuration(ctx, r.o.conns, 24*time.Hour, func(ctx context.Context, i int64) (int, error) {
		i-- // forDuration counts from 1
		if i >= n {
			return 0, errDone
		}
		key := keyOf(i)
		d, err := r.lim.Allow(ctx, key, p, cost)
		if err != nil {
			return 0, fmt.Errorf("failed to record a check: %w", err)
		}
		if !d.Allowed {
			return 0, errors.New("a check recording an id was denied: --keys is too few for the load")
		}
		ids[i] = recorded{key: key, id: d.ID}
		return 1, nil
	})
	return ids, err
}

// report writes the phase's section.
func (r *outcomeRun) report(rep *report, redisNote string, figs [][]*outcomeFigures) {
	o := r.o
	rep.line("")
	rep.line("## Outcomes: what a refund and a settle cost beside a check")
	rep.line("")
	rep.line("The limiter's own calls in this process — `limiter.Allow`, `Refund` and `Settle`, no HTTP — through one `limiter.New` as the server runs it (batched; its deny cache following the resets channel, so each refund or settle that changes a log announces it to one subscriber), %d concurrent callers, on %s. Every round runs on %d fresh keys: first, untimed, checks record the ids the refunds and settles take, round robin over the keys (cost 1, and cost 2 for the settles to fewer; %.1f× as many as the variant did in a round's time at its fastest so far); then the variants take turns, %s each, in each of %d rounds. Every variant changes one entry of logs of the same sizes, nothing is denied, and each answer is checked (a refund found 1 entry and left 0, one already gone found 0, a settle found 1 and left 2, or found 2 and left 1). Figures are medians over the rounds; ratios are each variant's over the check's in the same round.",
		o.conns, redisNote, o.keys, outcomeHeadroom, o.slice(), o.rounds)
	rep.line("")
	rep.line("- **script µs**: EVALSHA's usec ÷ calls in INFO commandstats — the script's own run time, I/O excluded")
	rep.line("- **CPU µs**: redis-server's CPU time (INFO cpu, user + sys) ÷ calls — everything the process did for them")
	rep.line("")
	rep.line("| policy | call | calls/s | min–max | script µs | CPU µs | ÷ check: calls/s | ÷ check: script µs | ÷ check: CPU µs |")
	rep.line("|---|---|---:|---:|---:|---:|---:|---:|---:|")
	var short []string
	for pi, fs := range figs {
		check := fs[0]
		for vi, f := range fs {
			row := fmt.Sprintf("| `%s` | %s | %.0f | %s | %.2f | %.2f |", outcomePolicies[pi], r.variants[vi].name, median(f.rates), spread("%.0f", f.rates), median(f.usec), median(f.cpu))
			if vi == 0 {
				rep.line("%s — | — | — |", row)
			} else {
				rate, usec, cpu := ratios(f.rates, check.rates), ratios(f.usec, check.usec), ratios(f.cpu, check.cpu)
				rep.line("%s %.2f (%s) | **%.2f** (%s) | **%.2f** (%s) |", row, median(rate), spread("%.2f", rate), median(usec), spread("%.2f", usec), median(cpu), spread("%.2f", cpu))
			}
			if f.short > 0 {
				short = append(short, fmt.Sprintf("%s under `%s` in %d of %d rounds", r.variants[vi].name, outcomePolicies[pi], f.short, o.rounds))
			}
		}
	}
	rep.line("")
	if len(short) > 0 {
		rep.line("- ran out of recorded ids before the round's time (their figures cover the calls made): %s", strings.Join(short, "; "))
	}
	rep.line("- checks/s of the warm-up (1 s, sizing the first round's ids): %.0f", r.warm)
	rep.line("- measured at the library only: the server's HTTP refund and settle endpoints are not part of this phase")
}
