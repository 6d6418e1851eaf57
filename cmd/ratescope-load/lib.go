package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
)

// measureLibrary compares, on the same Redis and with the same goroutines,
// Limiter.Allow (batched, as shipped; and one round trip per check) with raw
// pipelined EVALSHA of the same script and a plain go-redis Script.Run loop.
func measureLibrary(ctx context.Context, o options, redisURL string, rep *report) error {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	opt.PoolSize = max(opt.PoolSize, o.conns)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	p, err := limiter.ParsePolicy("lib=100000/1s")
	if err != nil {
		return err
	}
	script := redis.NewScript(limiter.CheckScriptSource())
	if err := script.Load(ctx, rdb).Err(); err != nil {
		return fmt.Errorf("failed to load the script: %w", err)
	}
	prefix := uuid.NewString()[:8]
	key := func(i int64) string { return fmt.Sprintf("%s-%d", prefix, i%1000) }
	rawArgs := func(i int64) ([]string, []any) {
		return []string{limiter.RedisKey(key(i), p.Name)}, []any{1, uuid.NewString(), limiter.MaxEvict, 100000, 1000}
	}
	batched := limiter.New(rdb)
	plain := limiter.New(rdb, limiter.WithoutBatching())
	const perPipeline = 16

	runs := []struct {
		name string
		per  int64 // checks per call of fn
		fn   func(i int64) error
	}{
		{"limiter.Allow, batched (default)", 1, func(i int64) error { _, err := batched.Allow(ctx, key(i), p, 1); return err }},
		{"limiter.Allow, WithoutBatching", 1, func(i int64) error { _, err := plain.Allow(ctx, key(i), p, 1); return err }},
		{fmt.Sprintf("raw pipelined EVALSHA, %d per pipeline", perPipeline), perPipeline, func(i int64) error {
			pipe := rdb.Pipeline()
			for j := range int64(perPipeline) {
				keys, args := rawArgs(i*perPipeline + j)
				script.EvalSha(ctx, pipe, keys, args...)
			}
			_, err := pipe.Exec(ctx)
			return err
		}},
		{"plain go-redis Script.Run per call", 1, func(i int64) error {
			keys, args := rawArgs(i)
			return script.Run(ctx, rdb, keys, args...).Err()
		}},
	}
	rates := make([]float64, len(runs))
	for k, r := range runs {
		rate, err := forDuration(ctx, o.conns, o.duration, r.per, r.fn)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		rates[k] = rate
	}
	rep.line("")
	rep.line("## Library: Limiter.Allow against raw calls of the same script (%d goroutines, %s each)", o.conns, o.duration)
	rep.line("")
	rep.line("| client | checks/s |")
	rep.line("|---|---|")
	for k, r := range runs {
		rep.line("| %s | %.0f |", r.name, rates[k])
	}
	rep.line("")
	rep.line("batched limiter / pipelined EVALSHA = **%.2f** (target ≥ 0.8); batched limiter / Script.Run = **%.2f** (target ≥ 2)",
		rates[0]/rates[2], rates[0]/rates[3])
	return nil
}

// forDuration calls fn from g goroutines for d and returns checks per second.
func forDuration(ctx context.Context, g int, d time.Duration, per int64, fn func(i int64) error) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var next, done atomic.Int64
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range g {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := fn(next.Add(1)); err != nil {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
				done.Add(per)
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), firstErr
}
