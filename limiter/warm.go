package limiter

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// scripts lists every script the limiter sends, for Warm.
var scripts []*redis.Script

// newScript is redis.NewScript, listed for Warm with its many variant
// (many.go).
func newScript(src string) *redis.Script {
	s := redis.NewScript(src)
	m := redis.NewScript(manySource(src))
	manyOf[s] = m
	scripts = append(scripts, s, m)
	return s
}

// Warm readies Redis and the connection pool for the first checks: it loads
// every script the limiter sends (on a cluster, on every master), so the first
// check of each kind is not sent twice — refused as unknown, then in full —
// and it does so over as many connections at once as pipelines may be in
// flight, so they are open before the first burst. Call it at start-up; checks
// work without it, and a Redis that restarts empty gets its scripts again as
// checks find them missing.
func (l *Limiter) Warm(ctx context.Context) error {
	n := 1
	if l.batch != nil {
		n = l.batch.maxInFlight
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for _, s := range scripts {
				if err := s.Load(ctx, l.rdb).Err(); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
