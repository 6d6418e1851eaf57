package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
)

// The algorithms phase measures SPEC §8's figures for every algorithm:
//
//   - Redis µs per check: the usec INFO commandstats adds to EVALSHA (and
//     EVAL) per call, while filling empty windows to the limit (allowed) and
//     then on full ones (denied), at each of algoLimits. Windows are a day,
//     so nothing expires or refills much meanwhile.
//   - bytes per key: MEMORY USAGE (every element sampled) of all the keys one
//     client holds under a one-rule policy with a full window.
//   - agreement with the log on one recorded trace of bursty traffic (fixed
//     seed), replayed in real time against all five on the same Redis, from an
//     edge of the rule's window on Redis's clock: the fraction of requests an
//     algorithm decides as the log does.
var algoLimits = []int{10, 1_000, 100_000}

const (
	algoWindow     = "24h"
	algoFillChecks = 10_000 // at least this many checks fill windows (limit × keys)
	algoFullChecks = 10_000 // checks on the full windows
	algoWorkers    = 64
	traceRule      = "10/10s"
	traceSeed      = 13
)

type algoCost struct {
	allowedUs, deniedUs float64 // Redis µs per check
	bytes               int64   // of one client's keys
}

func measureAlgorithms(ctx context.Context, e *env) error {
	rdb, err := e.redisClient(algoWorkers)
	if err != nil {
		return err
	}
	defer rdb.Close()
	lim := limiter.New(rdb)

	costs := map[string]map[int]algoCost{}
	for _, alg := range algorithmNames() {
		costs[alg] = map[int]algoCost{}
		for _, l := range algoLimits {
			progress("  %s at limit %d", alg, l)
			c, err := measureAlgoCost(ctx, rdb, lim, alg, l)
			if err != nil {
				return fmt.Errorf("%s at limit %d: %w", alg, l, err)
			}
			costs[alg][l] = c
		}
	}
	progress("  replaying the trace for %s", e.o.traceDuration)
	tr, err := replayTrace(ctx, rdb, lim, burstyTrace(traceSeed, e.o.traceDuration))
	if err != nil {
		return err
	}

	r := e.rep
	r.line("")
	r.line("## Algorithms (SPEC §8)")
	r.line("")
	r.line("One-rule policies `LIMIT/%s`; Redis µs per check from INFO commandstats (EVALSHA usec ÷ calls): while filling %d+ empty windows' worth to the limit (allowed), then %d checks on the full windows (denied). Bytes: `MEMORY USAGE … SAMPLES 0` of one client's keys with a full window.", algoWindow, algoFillChecks, algoFullChecks)
	r.line("")
	r.line("| algorithm | µs/check allowed, limit %s | µs/check denied | bytes per client key |", joinInts(algoLimits, " / "))
	r.line("|---|---|---|---|")
	for _, alg := range algorithmNames() {
		var a, d, b []string
		for _, l := range algoLimits {
			c := costs[alg][l]
			a, d, b = append(a, fmt.Sprintf("%.1f", c.allowedUs)), append(d, fmt.Sprintf("%.1f", c.deniedUs)), append(b, strconv.FormatInt(c.bytes, 10))
		}
		r.line("| `%s` | %s | %s | %s |", alg, strings.Join(a, " / "), strings.Join(d, " / "), strings.Join(b, " / "))
	}
	r.line("")
	r.line("Agreement with `log` on one bursty trace (seed %d, %s, %d requests: Poisson background at 0.5/s plus bursts of 5–25 requests within 300 ms, one every 6 s on average), rule `%s`, replayed in real time from an edge of the window on Redis's clock; the five decide each request in turn before the next is sent.", traceSeed, e.o.traceDuration, tr.n, traceRule)
	r.line("")
	r.line("| algorithm | agreement with `log` | allowed | most allowed in any %s |", strings.TrimPrefix(traceRule, "10/"))
	r.line("|---|---|---|---|")
	for _, alg := range algorithmNames() {
		r.line("| `%s` | %.1f %% | %d of %d | %d |", alg, 100*tr.agreement[alg], tr.allowed[alg], tr.n, tr.maxInWindow[alg])
	}
	return nil
}

func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, sep)
}

// measureAlgoCost fills fresh windows of limit l to the limit, then checks
// the full windows, reading Redis's script time around each part.
func measureAlgoCost(ctx context.Context, rdb *redis.Client, lim *limiter.Limiter, alg string, l int) (algoCost, error) {
	p, err := limiter.ParsePolicy(fmt.Sprintf("fig%d=%d/%s@%s", l, l, algoWindow, alg))
	if err != nil {
		return algoCost{}, err
	}
	keys := max(1, algoFillChecks/l)
	prefix := "fig-" + uuid.NewString()[:8] + "-"
	key := func(i int64) string { return prefix + strconv.FormatInt(i%int64(keys), 10) }
	// Load the script, so no EVAL fallback is timed.
	if _, err := lim.Window(ctx, key(0), p); err != nil {
		return algoCost{}, err
	}
	run := func(n int64) (float64, error) {
		before, err := scriptTime(ctx, rdb)
		if err != nil {
			return 0, err
		}
		if err := forN(ctx, n, func(i int64) error {
			_, err := lim.Allow(ctx, key(i), p, 1)
			return err
		}); err != nil {
			return 0, err
		}
		after, err := scriptTime(ctx, rdb)
		if err != nil {
			return 0, err
		}
		if after.calls <= before.calls {
			return 0, errors.New("INFO commandstats counted no scripts")
		}
		return (after.usec - before.usec) / (after.calls - before.calls), nil
	}
	var c algoCost
	if c.allowedUs, err = run(int64(keys * l)); err != nil {
		return c, err
	}
	if c.deniedUs, err = run(algoFullChecks); err != nil {
		return c, err
	}
	c.bytes, err = rdb.MemoryUsage(ctx, redisdata.StateKey(key(0), p.Name, string(p.AlgorithmName())), 0).Result()
	if err != nil {
		return c, fmt.Errorf("failed to read MEMORY USAGE: %w", err)
	}
	return c, rdb.Del(ctx, limiterKeys(prefix, keys, p)...).Err()
}

func limiterKeys(prefix string, n int, p limiter.Policy) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = redisdata.StateKey(prefix+strconv.Itoa(i), p.Name, string(p.AlgorithmName()))
	}
	return keys
}

// forN calls fn n times from algoWorkers goroutines; the first error stops it.
func forN(ctx context.Context, n int64, fn func(i int64) error) error {
	var mu sync.Mutex
	var next int64
	var firstErr error
	var wg sync.WaitGroup
	for range algoWorkers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := i >= n || firstErr != nil || ctx.Err() != nil
				mu.Unlock()
				if stop {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					firstErr = firstOf(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstOf(firstErr, ctx.Err())
}

func firstOf(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

type scriptStats struct{ calls, usec float64 }

// scriptTime sums calls and usec of EVALSHA and EVAL from INFO commandstats.
func scriptTime(ctx context.Context, rdb *redis.Client) (scriptStats, error) {
	c, err := readScriptCounters(ctx, rdb)
	if err != nil {
		return scriptStats{}, err
	}
	return scriptStats{calls: c.calls["evalsha"] + c.calls["eval"], usec: c.usec["evalsha"] + c.usec["eval"]}, nil
}

// burstyTrace is the recorded trace: request times in ms from its start,
// the same for a seed and duration on every machine (PCG is a stable
// generator).
func burstyTrace(seed uint64, d time.Duration) []int64 {
	rng := rand.New(rand.NewPCG(seed, 0))
	end := float64(d.Milliseconds())
	var ts []int64
	for t := rng.ExpFloat64() * 2000; t < end; t += rng.ExpFloat64() * 2000 {
		ts = append(ts, int64(t))
	}
	for t := rng.ExpFloat64() * 6000; t < end; t += rng.ExpFloat64() * 6000 {
		for range 5 + rng.IntN(21) {
			if o := t + float64(rng.IntN(300)); o < end {
				ts = append(ts, int64(o))
			}
		}
	}
	slices.Sort(ts)
	return ts
}

type traceResult struct {
	n           int
	agreement   map[string]float64
	allowed     map[string]int
	maxInWindow map[string]int
}

// replayTrace sends every request of the trace to all five algorithms with
// traceRule, on fresh keys, at its time from an edge of the window on Redis's
// clock, and compares their decisions with the log's.
func replayTrace(ctx context.Context, rdb *redis.Client, lim *limiter.Limiter, trace []int64) (traceResult, error) {
	policies := make([]limiter.Policy, len(algorithmNames()))
	for i, alg := range algorithmNames() {
		p, err := limiter.ParsePolicy("trace=" + traceRule + "@" + alg)
		if err != nil {
			return traceResult{}, err
		}
		policies[i] = p
	}
	w := policies[0].Rules[0].WindowMs()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return traceResult{}, fmt.Errorf("failed to read Redis's clock: %w", err)
	}
	edge := (now.UnixMilli()/w + 1) * w
	start := time.Now().Add(time.Duration(edge-now.UnixMilli()) * time.Millisecond)
	key := "trace-" + uuid.NewString()[:8]
	decisions := make([][]limiter.Decision, len(policies))
	for _, off := range trace {
		if err := sleepUntil(ctx, start.Add(time.Duration(off)*time.Millisecond)); err != nil {
			return traceResult{}, err
		}
		ds := make([]limiter.Decision, len(policies))
		errs := make([]error, len(policies))
		var wg sync.WaitGroup
		for i, p := range policies {
			wg.Go(func() { ds[i], errs[i] = lim.Allow(ctx, key, p, 1) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return traceResult{}, err
		}
		for i := range policies {
			decisions[i] = append(decisions[i], ds[i])
		}
	}
	res := traceResult{n: len(trace), agreement: map[string]float64{}, allowed: map[string]int{}, maxInWindow: map[string]int{}}
	for i, alg := range algorithmNames() {
		same := 0
		var times []int64
		for j, d := range decisions[i] {
			if d.Allowed == decisions[0][j].Allowed {
				same++
			}
			if d.Allowed {
				times = append(times, d.NowMs)
			}
		}
		res.agreement[alg] = float64(same) / float64(max(1, len(trace)))
		res.allowed[alg] = len(times)
		res.maxInWindow[alg] = mostInWindow(times, w)
	}
	return res, nil
}

// mostInWindow is the most of the sorted times inside any (t − w, t].
func mostInWindow(times []int64, w int64) int {
	best, lo := 0, 0
	for hi, t := range times {
		for times[lo] <= t-w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// algorithmNames names every algorithm, the log first.
func algorithmNames() []string {
	var names []string
	for _, d := range limiter.Algorithms() {
		names = append(names, string(d.Name))
	}
	return names
}
