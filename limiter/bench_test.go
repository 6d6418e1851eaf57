package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// parallel runs fn b.N times spread over g goroutines and reports checks/s.
func parallel(b *testing.B, g int, fn func(i int64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range g {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := fn(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "checks/s")
}

func benchClient(b *testing.B, url string) *redis.Client {
	opt, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// BenchmarkAllow measures Limiter.Allow on a real redis-server: batched (the
// default) and one round trip per check; 1 to 256 goroutines; one hot key or
// 1,000 keys; checks that are allowed (a 1 s window with a huge limit, so the
// log stays at its steady size) or denied (a full 1/1h window).
func BenchmarkAllow(b *testing.B) {
	url := redistest.URL(b)
	allow, _ := limiter.ParsePolicy("ballow=100000/1s")
	deny, _ := limiter.ParsePolicy("bdeny=1/1h")
	prefix := uuid.NewString()[:8]
	for _, mode := range []string{"batched", "plain"} {
		opts := []limiter.Option{}
		if mode == "plain" {
			opts = append(opts, limiter.WithoutBatching())
		}
		lim := limiter.New(benchClient(b, url), opts...)
		for _, outcome := range []string{"allow", "deny"} {
			p := allow
			if outcome == "deny" {
				p = deny
			}
			for _, keys := range []string{"hot", "1000keys"} {
				for _, g := range []int{1, 16, 64, 256} {
					b.Run(fmt.Sprintf("%s/%s/%s/g=%d", mode, outcome, keys, g), func(b *testing.B) {
						key := func(i int64) string {
							if keys == "hot" {
								return prefix + "-hot"
							}
							return fmt.Sprintf("%s-%d", prefix, i%1000)
						}
						if outcome == "deny" { // fill every key first
							for i := range int64(1000) {
								if _, err := lim.Allow(context.Background(), key(i), p, 1); err != nil {
									b.Fatal(err)
								}
							}
						}
						parallel(b, g, func(i int64) error {
							d, err := lim.Allow(context.Background(), key(i), p, 1)
							if err == nil && d.Allowed != (outcome == "allow") {
								err = fmt.Errorf("unexpected decision %+v", d)
							}
							return err
						})
					})
				}
			}
		}
	}
}

// BenchmarkBaselines are the yardsticks on the same Redis: raw
// pipelined EVALSHA of the same script (64 goroutines, 16 per pipeline) and a
// plain go-redis Script.Run per call (64 goroutines).
func BenchmarkBaselines(b *testing.B) {
	url := redistest.URL(b)
	c := benchClient(b, url)
	script := redis.NewScript(limiter.CheckScriptSource())
	if err := script.Load(context.Background(), c).Err(); err != nil {
		b.Fatal(err)
	}
	prefix := uuid.NewString()[:8]
	args := func(i int64) ([]string, []any) {
		return []string{limiter.RedisKey(fmt.Sprintf("%s-%d", prefix, i%1000), "ballow")},
			[]any{1, uuid.NewString(), limiter.MaxEvict, 100000, 1000}
	}
	b.Run("pipelined-evalsha/g=64/16-per-pipeline", func(b *testing.B) {
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		for range 64 {
			wg.Go(func() {
				for {
					first := next.Add(16) - 16
					if first >= int64(b.N) {
						return
					}
					pipe := c.Pipeline()
					for i := first; i < min(first+16, int64(b.N)); i++ {
						keys, a := args(i)
						script.EvalSha(context.Background(), pipe, keys, a...)
					}
					if _, err := pipe.Exec(context.Background()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "checks/s")
	})
	b.Run("script-run/g=64", func(b *testing.B) {
		parallel(b, 64, func(i int64) error {
			keys, a := args(i)
			return script.Run(context.Background(), c, keys, a...).Err()
		})
	})
}
