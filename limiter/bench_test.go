package limiter_test

// Benchmarks on a real redis-server (started per top-level benchmark; skipped
// without one, like the tests):
//
//	go test -run '^$' -bench . -benchtime 2s ./limiter/
//
// Each sub-benchmark runs b.N checks spread over an explicit number of
// goroutines, so ns/op is wall time per check at that concurrency and
// checks/s is its inverse. One go-redis client per benchmark, 64 connections,
// no retries (as the server configures it).
//
// Steady state: "allow" uses a 1 s window with a limit no run reaches, so a
// log holds the last second of checks and each check evicts about as many
// entries as it adds; nothing grows without bound. The hot key's log holds
// tens of thousands of entries (a skiplist); each of the 1,000 keys' holds
// under a hundred (a listpack). "deny" uses limit 1 per hour on keys filled
// once, so every check is a denial that records nothing.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

var benchGoroutines = []int{1, 16, 64, 256}

const (
	benchKeys     = 1000
	benchPipeline = 16
)

// The policies: "allow" never reaches its limit, "deny" is full after one check.
const (
	benchAllowPolicy = "ballow=100000/1s"
	benchDenyPolicy  = "bdeny=1/1h"
)

func benchPolicy(b *testing.B, s string) limiter.Policy {
	p, err := limiter.ParsePolicy(s)
	if err != nil {
		b.Fatalf("failed to parse policy %s: %v", s, err)
	}
	return p
}

// benchClient starts a redis-server for this benchmark and returns a client of it.
func benchClient(b *testing.B) *redis.Client {
	s := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64, ContextTimeoutEnabled: true, MaxRetries: -1})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// runChecks runs b.N checks from g goroutines, each taking batch consecutive
// check numbers at a time and handing them to do(first, n). It reports
// checks/s; the first error stops the run.
func runChecks(b *testing.B, g, batch int, do func(first, n int64) error) {
	b.ReportAllocs()
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	total := int64(b.N)
	b.ResetTimer()
	start := time.Now()
	for range g {
		wg.Go(func() {
			for !failed.Load() {
				first := next.Add(int64(batch)) - int64(batch)
				if first >= total {
					return
				}
				if err := do(first, min(int64(batch), total-first)); err != nil {
					if failed.CompareAndSwap(false, true) {
						b.Error(err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/took.Seconds(), "checks/s")
}

func manyKey(prefix string, i int64) string { return fmt.Sprintf("%s-%d", prefix, i%benchKeys) }

// BenchmarkAllow measures Limiter.Allow: batched (the default), one round
// trip per check, and batched with the local deny cache serving; allowed and
// denied checks; one hot key and 1,000 keys; 1 to
// 256 goroutines.
func BenchmarkAllow(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	benchAllow, benchDeny := benchPolicy(b, benchAllowPolicy), benchPolicy(b, benchDenyPolicy)
	prefix := uuid.NewString()[:8]
	hot := prefix + "-hot"
	// Fill the deny policy's logs once: every later check on them is denied.
	filler := limiter.New(c, limiter.WithoutBatching())
	for i := range int64(benchKeys) {
		for _, k := range []string{hot, manyKey(prefix, i)} {
			if _, err := filler.Allow(ctx, k, benchDeny, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	// "cached" runs the deny cache (the others never start it): denials are
	// answered locally, allowed checks pay its look-up on top of batching.
	cached := limiter.New(c)
	serve(b, cached)
	modes := []struct {
		name string
		lim  *limiter.Limiter
	}{
		{"batched", limiter.New(c)},
		{"plain", limiter.New(c, limiter.WithoutBatching())},
		{"cached", cached},
	}
	for _, m := range modes {
		for _, outcome := range []string{"allow", "deny"} {
			p := benchAllow
			if outcome == "deny" {
				p = benchDeny
			}
			for _, keys := range []string{"hot", "keys1000"} {
				key := func(i int64) string {
					if keys == "hot" {
						return hot
					}
					return manyKey(prefix, i)
				}
				for _, g := range benchGoroutines {
					b.Run(fmt.Sprintf("%s/%s/%s/g=%d", m.name, outcome, keys, g), func(b *testing.B) {
						var unexpected atomic.Int64
						runChecks(b, g, 1, func(i, _ int64) error {
							d, err := m.lim.Allow(ctx, key(i), p, 1)
							if err != nil {
								return err
							}
							if d.Allowed != (outcome == "allow") {
								if outcome == "deny" {
									return fmt.Errorf("a check on a full log was allowed: %+v", d)
								}
								// Only past 100,000 checks/s on one key; say so rather than fail.
								unexpected.Add(1)
							}
							return nil
						})
						if n := unexpected.Load(); n > 0 {
							b.ReportMetric(float64(n)/float64(b.N), "denied/op")
						}
					})
				}
			}
		}
	}
}

// BenchmarkBaselines are the yardsticks of issue #6 on the same kind of Redis,
// running limiter/check.lua itself (read from the file, not through the
// limiter) with the limiter's arguments on 1,000 keys, every check allowed:
//
//   - pipelined-evalsha: pipelines of 16 EVALSHA from g goroutines (up to
//     16·g checks in flight), the ceiling of what batching can reach;
//   - script-run: go-redis Script.Run per call (EVALSHA, EVAL on NOSCRIPT),
//     one round trip per check, from g goroutines.
//
// Compare with BenchmarkAllow/batched/allow/keys1000 and /plain/allow/keys1000.
func BenchmarkBaselines(b *testing.B) {
	src, err := os.ReadFile("check.lua")
	if err != nil {
		b.Fatalf("failed to read the script: %v", err)
	}
	c := benchClient(b)
	ctx := context.Background()
	script := redis.NewScript(string(src))
	if err := script.Load(ctx, c).Err(); err != nil {
		b.Fatalf("failed to load the script: %v", err)
	}
	benchAllow := benchPolicy(b, benchAllowPolicy)
	prefix := uuid.NewString()[:8]
	args := func(i int64) ([]string, []any) {
		a := []any{1, uuid.NewString(), redisdata.MaxEvict}
		for _, r := range benchAllow.Rules {
			a = append(a, r.Limit, r.WindowMs())
		}
		return []string{redisdata.LogKey(manyKey(prefix, i), benchAllow.Name)}, a
	}
	for _, g := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("pipelined-evalsha/%d-per-pipeline/g=%d", benchPipeline, g), func(b *testing.B) {
			runChecks(b, g, benchPipeline, func(first, n int64) error {
				pipe := c.Pipeline()
				for i := first; i < first+n; i++ {
					keys, a := args(i)
					script.EvalSha(ctx, pipe, keys, a...)
				}
				_, err := pipe.Exec(ctx)
				return err
			})
		})
	}
	for _, g := range benchGoroutines {
		b.Run(fmt.Sprintf("script-run/g=%d", g), func(b *testing.B) {
			runChecks(b, g, 1, func(i, _ int64) error {
				keys, a := args(i)
				return script.Run(ctx, c, keys, a...).Err()
			})
		})
	}
}

// BenchmarkAllowAlgorithms measures batched Limiter.Allow per algorithm from
// 64 goroutines on 1,000 keys, allowed and denied as in BenchmarkAllow. The
// Redis side of each (µs per script, bytes per key) is what
// `go run ./cmd/ratescope-load --skip-http --skip-lib --skip-ws` reports.
func BenchmarkAllowAlgorithms(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	prefix := uuid.NewString()[:8]
	for _, alg := range algorithms {
		allow := benchPolicy(b, benchAllowPolicy+"@"+string(alg))
		deny := benchPolicy(b, benchDenyPolicy+"@"+string(alg))
		filler := limiter.New(c, limiter.WithoutBatching())
		for i := range int64(benchKeys) {
			if _, err := filler.Allow(ctx, manyKey(prefix, i), deny, 1); err != nil {
				b.Fatal(err)
			}
		}
		lim := limiter.New(c)
		for _, outcome := range []string{"allow", "deny"} {
			p := allow
			if outcome == "deny" {
				p = deny
			}
			b.Run(fmt.Sprintf("%s/%s/keys1000/g=64", alg, outcome), func(b *testing.B) {
				runChecks(b, 64, 1, func(i, _ int64) error {
					d, err := lim.Allow(ctx, manyKey(prefix, i), p, 1)
					if err == nil && outcome == "deny" && d.Allowed {
						err = fmt.Errorf("a check on a full window was allowed: %+v", d)
					}
					return err
				})
			})
		}
	}
}
