package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
)

// libPolicy is the library phase's policy: every check allowed and recorded.
const libPolicy = "lib=100000/1s"

// libRun is one way of running the check script.
type libRun struct {
	name    string
	workers int
	// call performs checks (one, or a pipeline of them) and says how many.
	call func(ctx context.Context, i int64) (int, error)

	rates []float64 // checks/s, one per round
	cpus  []cpuUse  // one per round
	gen   []float64 // µs of Go client CPU per check, one per round
	redis []float64 // µs of redis-server CPU per check, one per round
	depth []float64 // scripts Redis ran per read from a socket, one per round
}

// measureLibrary compares, in this process and on the same Redis, Limiter.Allow
// (batched, as the server uses it, and one round trip per check) with raw
// pipelined EVALSHA of the same script and a plain go-redis Script.Run per
// call. Every variant does the same work per check: a fresh UUID member, one
// of --keys keys, the same arguments.
func measureLibrary(ctx context.Context, e *env) error {
	o := e.o
	opt, err := redis.ParseURL(e.redisURL)
	if err != nil {
		return fmt.Errorf("failed to parse the Redis URL: %w", err)
	}
	// As the server configures its client, with a pool big enough that no
	// variant waits for a connection.
	opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
	opt.PoolSize = max(o.conns, 10)
	rdb := redis.NewClient(opt)
	defer rdb.Close()

	p, err := limiter.ParsePolicy(libPolicy)
	if err != nil {
		return fmt.Errorf("failed to parse policy %s: %w", libPolicy, err)
	}
	script := redis.NewScript(redisdata.CheckScript)
	if err := script.Load(ctx, rdb).Err(); err != nil {
		return fmt.Errorf("failed to load the check script: %w", err)
	}
	prefix := "lib-" + uuid.NewString()[:8] + "-"
	key := func(i int64) string { return fmt.Sprintf("%s%d", prefix, i%int64(o.keys)) }
	rawArgs := func(i int64) ([]string, []any) {
		args := []any{1, uuid.NewString(), redisdata.MaxEvict}
		for _, r := range p.Rules {
			args = append(args, r.Limit, r.WindowMs())
		}
		return []string{redisdata.LogKey(key(i), p.Name)}, args
	}
	allow := func(l *limiter.Limiter) func(context.Context, int64) (int, error) {
		return func(ctx context.Context, i int64) (int, error) {
			d, err := l.Allow(ctx, key(i), p, 1)
			if err == nil && !d.Allowed {
				err = errors.New("a check was denied: the keys are too few for the load")
			}
			return 1, err
		}
	}
	pipelined := func(ctx context.Context, i int64) (int, error) {
		pipe := rdb.Pipeline()
		for j := range int64(o.pipeline) {
			keys, args := rawArgs(i*int64(o.pipeline) + j)
			script.EvalSha(ctx, pipe, keys, args...)
		}
		_, err := pipe.Exec(ctx)
		return o.pipeline, err
	}
	scriptRun := func(ctx context.Context, i int64) (int, error) {
		keys, args := rawArgs(i)
		return 1, script.Run(ctx, rdb, keys, args...).Err()
	}

	batched := limiter.New(rdb)
	runs := []*libRun{
		{name: "limiter.Allow, batched (the default, as the server runs it)", workers: o.conns, call: allow(batched)},
		{name: "limiter.Allow, WithoutBatching", workers: o.conns, call: allow(limiter.New(rdb, limiter.WithoutBatching()))},
		{name: fmt.Sprintf("raw pipelined EVALSHA, %d goroutines × %d per pipeline", o.conns, o.pipeline), workers: o.conns, call: pipelined},
		{name: fmt.Sprintf("raw pipelined EVALSHA, %d goroutines × %d per pipeline", max(1, o.conns/o.pipeline), o.pipeline), workers: max(1, o.conns/o.pipeline), call: pipelined},
		{name: fmt.Sprintf("go-redis Script.Run per call, %d goroutines", o.conns), workers: o.conns, call: scriptRun},
	}
	if _, err := forDuration(ctx, o.conns, time.Second, runs[0].call); err != nil {
		return fmt.Errorf("failed to warm up: %w", err)
	}
	progress("  %d rounds of %s per variant", o.rounds, o.slice())
	for range o.rounds {
		for _, r := range runs {
			c0, err := readRedisCounters(ctx, rdb)
			if err != nil {
				return err
			}
			meter := newCPUMeter(nil, e.redis)
			rate, err := forDuration(ctx, r.workers, o.slice(), r.call)
			if err != nil {
				return fmt.Errorf("failed to measure %s: %w", r.name, err)
			}
			cpu := meter.stop()
			c1, err := readRedisCounters(ctx, rdb)
			if err != nil {
				return err
			}
			r.depth = append(r.depth, float64(c1.scripts-c0.scripts)/float64(max(1, c1.reads-c0.reads)))
			r.rates, r.cpus = append(r.rates, rate), append(r.cpus, cpu)
			r.gen, r.redis = append(r.gen, perCheck(cpu.gen, rate)), append(r.redis, perCheck(cpu.redis, rate))
		}
	}

	rep := e.rep
	rep.line("")
	rep.line("## Library: limiter.Allow against raw calls of the same script")
	rep.line("")
	rep.line("In the load tool's own process, one go-redis client (pool of %d connections, no retries, as the server sets it), %s per variant, policy `%s` over %d keys (every check allowed and recorded). \"µs CPU per check\" is CPU time divided by checks done; \"scripts per socket read\" (from INFO: EVALSHA and EVAL calls / total_reads_processed) is about the pipeline depth Redis sees. Medians over the rounds.",
		opt.PoolSize, o.duration, libPolicy, o.keys)
	rep.line("")
	rep.line("| client | checks/s (median) | min–max | µs CPU per check, Go client | µs CPU per check, redis-server | scripts per socket read in Redis |")
	rep.line("|---|---:|---:|---:|---:|---:|")
	for _, r := range runs {
		rep.line("| %s | %.0f | %s | %s | %s | %.1f |", r.name, median(r.rates), spread("%.0f", r.rates), micros(r.gen), micros(r.redis), median(r.depth))
	}
	rep.line("")
	rep.line("- CPU during the batched limiter's rounds: %s", meanCPU(runs[0].cpus))
	lim := runs[0].rates
	toPipe, toNarrow, toRun, toPlain := ratios(lim, runs[2].rates), ratios(lim, runs[3].rates), ratios(lim, runs[4].rates), ratios(lim, runs[1].rates)
	rep.line("- batched limiter / pipelined EVALSHA (%d goroutines) = **%.2f** (rounds: %s; target ≥ 0.8: %s); against %d goroutines × %d, the same %d checks in flight as the limiter's callers: %.2f (%s)",
		o.conns, median(toPipe), spread("%.2f", toPipe), verdict(median(toPipe), 0.8), max(1, o.conns/o.pipeline), o.pipeline, o.conns, median(toNarrow), spread("%.2f", toNarrow))
	rep.line("- batched limiter / Script.Run = **%.2f** (rounds: %s; target ≥ 2: %s)", median(toRun), spread("%.2f", toRun), verdict(median(toRun), 2))
	rep.line("- batched limiter / the same limiter WithoutBatching = %.2f (%s)", median(toPlain), spread("%.2f", toPlain))
	return nil
}

// perCheck turns cores used at rate checks/s into µs of CPU per check; -1
// when unknown.
func perCheck(cores, rate float64) float64 {
	if cores < 0 || rate <= 0 {
		return -1
	}
	return cores / rate * 1e6
}

// micros gives the median of per-check CPU figures, "n/a" when unknown.
func micros(xs []float64) string {
	if len(xs) == 0 || slices.Min(xs) < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", median(xs))
}

// errDone is what a forDuration function returns when it has done all it
// was to do: the run ends early, without an error.
var errDone = errors.New("done")

// forDuration calls fn from workers goroutines for d and returns checks per
// second. The first error ends the run.
func forDuration(ctx context.Context, workers int, d time.Duration, fn func(context.Context, int64) (int, error)) (float64, error) {
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var next, done atomic.Int64
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for rctx.Err() == nil {
				n, err := fn(context.WithoutCancel(rctx), next.Add(1))
				if errors.Is(err, errDone) {
					done.Add(int64(n))
					cancel()
					return
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					cancel()
					return
				}
				done.Add(int64(n))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if firstErr != nil {
		return 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(done.Load()) / took.Seconds(), nil
}

// redisCounters are INFO counters of the Redis under test: scripts run
// (EVALSHA and EVAL calls; the commands inside scripts count separately in
// total_commands_processed) and reads from client sockets.
type redisCounters struct{ scripts, reads int64 }

func readRedisCounters(ctx context.Context, rdb *redis.Client) (redisCounters, error) {
	info, err := rdb.Info(ctx, "stats", "commandstats").Result()
	if err != nil {
		return redisCounters{}, fmt.Errorf("failed to read INFO: %w", err)
	}
	var c redisCounters
	for line := range strings.SplitSeq(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var n int64
		switch name {
		case "total_reads_processed":
			n, err = strconv.ParseInt(value, 10, 64)
			c.reads = n
		case "cmdstat_evalsha", "cmdstat_eval":
			calls, _, _ := strings.Cut(strings.TrimPrefix(value, "calls="), ",")
			n, err = strconv.ParseInt(calls, 10, 64)
			c.scripts += n
		}
		if err != nil {
			return redisCounters{}, fmt.Errorf("failed to read INFO %s: %w", name, err)
		}
	}
	return c, nil
}
