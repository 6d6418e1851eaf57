package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/limiter"
)

// The leases phase (--leases) measures what a concurrency lease costs beside
// a check: Limiter.Acquire followed by Limiter.Release (one unit of work:
// a request in flight taken and given back) against Limiter.Allow, in this
// process, through one limiter as the server runs it, on a redis-server of
// its own (unless --redis-url is given). The check is the baseline measured
// in the same run: the two take turns, --duration / --rounds each, in each
// of --rounds rounds, from --conns concurrent callers over --keys fresh keys
// per round. Per variant: units/s, Redis calls/s, and Redis's script µs and
// CPU µs per call (INFO commandstats, INFO cpu), with the ratio of calls/s
// to the check's in the same round.

// The phase's policies: a limit no caller reaches, so every check is
// allowed and every acquire held, and each answer is checked.
const (
	leaseCheckPolicy = "lease-check=100000/1h"
	leasePolicy      = "lease-held=100000/inflight+lease=1m"
)

// leaseVariant is one kind of work the phase times: calls Redis calls per
// unit.
type leaseVariant struct {
	name  string
	calls int
	run   func(ctx context.Context, lim *limiter.Limiter, key string) error
}

func leaseVariants(check, lease limiter.Policy) []leaseVariant {
	return []leaseVariant{
		{name: "check", calls: 1, run: func(ctx context.Context, lim *limiter.Limiter, key string) error {
			d, err := lim.Allow(ctx, key, check, 1)
			if err == nil && !d.Allowed {
				err = errors.New("a check was denied")
			}
			return err
		}},
		{name: "acquire + release", calls: 2, run: func(ctx context.Context, lim *limiter.Limiter, key string) error {
			l, err := lim.Acquire(ctx, key, lease)
			if err != nil {
				return fmt.Errorf("failed to acquire: %w", err)
			}
			if !l.Held {
				return errors.New("an acquire was refused")
			}
			r, err := lim.Release(ctx, key, lease, l.ID)
			if err != nil {
				return fmt.Errorf("failed to release: %w", err)
			}
			if !r.Released {
				return fmt.Errorf("a release of %s found it gone", l.ID)
			}
			return nil
		}},
	}
}

func measureLeases(ctx context.Context, e *env) error {
	o := e.o
	rdb, redisNote, done, err := e.phaseRedis(ctx, "leases", max(o.conns, 10))
	if err != nil {
		return err
	}
	defer done()
	lim := limiter.New(rdb)
	check, err := limiter.ParsePolicy(leaseCheckPolicy)
	if err != nil {
		return err
	}
	lease, err := limiter.ParsePolicy(leasePolicy)
	if err != nil {
		return err
	}
	variants := leaseVariants(check, lease)
	type figures struct{ units, calls, usec, cpu []float64 }
	figs := make([]figures, len(variants))
	progress("  %d rounds of %s per variant", o.rounds, o.slice())
	for range o.rounds {
		prefix := "lease-" + uuid.NewString()[:8] + "-"
		for vi, v := range variants {
			before, err := readScriptCounters(ctx, rdb)
			if err != nil {
				return err
			}
			rate, err := forDuration(ctx, o.conns, o.slice(), func(ctx context.Context, i int64) (int, error) {
				return 1, v.run(ctx, lim, prefix+strconv.FormatInt(i%int64(o.keys), 10))
			})
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			after, err := readScriptCounters(ctx, rdb)
			if err != nil {
				return err
			}
			calls := after.calls["evalsha"] + after.calls["eval"] - before.calls["evalsha"] - before.calls["eval"]
			if calls <= 0 {
				return fmt.Errorf("%s: INFO commandstats counted no EVALSHA", v.name)
			}
			usec := after.usec["evalsha"] + after.usec["eval"] - before.usec["evalsha"] - before.usec["eval"]
			f := &figs[vi]
			f.units = append(f.units, rate)
			f.calls = append(f.calls, rate*float64(v.calls))
			f.usec = append(f.usec, usec/calls)
			f.cpu = append(f.cpu, (after.cpu-before.cpu)*1e6/calls)
		}
		if err := unlinkPrefix(ctx, rdb, prefix); err != nil {
			return err
		}
	}
	rep := e.rep
	rep.line("")
	rep.line("## Leases: what a request in flight costs beside a check")
	rep.line("")
	rep.line("The limiter's own calls in this process — `limiter.Acquire` then `Release` (one unit: a request in flight taken and given back, two Redis calls) against `limiter.Allow` (one call) as the baseline of the same run — through one `limiter.New` as the server runs it, %d concurrent callers over %d fresh keys per round, on %s. The variants take turns, %s each, in each of %d rounds; `%s` and `%s` are never reached, and every answer is checked. Figures are medians over the rounds.",
		o.conns, o.keys, redisNote, o.slice(), o.rounds, leaseCheckPolicy, leasePolicy)
	rep.line("")
	rep.line("| work | units/s | calls/s | min–max calls/s | script µs per call | CPU µs per call | calls/s ÷ check's |")
	rep.line("|---|---:|---:|---:|---:|---:|---:|")
	for vi, v := range variants {
		f := figs[vi]
		ratio := "—"
		if vi > 0 {
			r := ratios(f.calls, figs[0].calls)
			ratio = fmt.Sprintf("**%.2f** (%s)", median(r), spread("%.2f", r))
		}
		rep.line("| %s | %.0f | %.0f | %s | %.2f | %.2f | %s |", v.name, median(f.units), median(f.calls), spread("%.0f", f.calls), median(f.usec), median(f.cpu), ratio)
	}
	rep.line("")
	rep.line("- measured at the library only: the server's HTTP lease endpoints add what a check's HTTP round trip adds")
	return nil
}
