package naive_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/naive"
	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
)

// TestNaiveOvershoots shows why the Lua script exists: with every request
// reading before any writes (the barrier), check-then-act lets all of them
// through, not the limit.
func TestNaiveOvershoots(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	n := naive.New(c)
	p := mustPolicy(t, "demo=5/10s")
	const requests = 50
	key := uniqueKey(t)
	var read sync.WaitGroup
	read.Add(requests)
	allRead := make(chan struct{})
	go func() { read.Wait(); close(allRead) }()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range requests {
		wg.Go(func() {
			<-start
			ok, err := n.Allow(context.Background(), key, p, naive.Options{
				Think:     time.Millisecond,
				AfterRead: func() { read.Done(); <-allRead },
			})
			if err != nil {
				t.Error(err)
			}
			if ok {
				allowed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if allowed.Load() != requests {
		t.Fatalf("naive allowed %d of %d, want all of them (limit 5)", allowed.Load(), requests)
	}
	if n := len(members(t, c, key, p)); n != requests {
		t.Fatalf("%d entries recorded, want %d", n, requests)
	}
	// Sequentially it does respect the limit: the flaw is only the race.
	key = uniqueKey(t)
	var seq int
	for range 8 {
		if ok, err := n.Allow(context.Background(), key, p, naive.Options{}); err != nil {
			t.Fatal(err)
		} else if ok {
			seq++
		}
	}
	if seq != 5 {
		t.Fatalf("sequential naive allowed %d, want 5", seq)
	}
}

func mustPolicy(t testing.TB, s string) limiter.Policy {
	p, err := limiter.ParsePolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newClient is a client for url with timeouts for a loaded machine.
func newClient(t testing.TB, url string) *redis.Client {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.ReadTimeout, opt.PoolTimeout = 30*time.Second, 30*time.Second
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// uniqueKey is a key no other test uses.
func uniqueKey(t testing.TB) string { return "naive-" + uuid.NewString()[:8] }

// TestMain says once, after the tests, what a missing redis-server cost.
func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }

func members(t testing.TB, c redis.UniversalClient, key string, p limiter.Policy) []redis.Z {
	t.Helper()
	zs, err := c.ZRangeWithScores(context.Background(), redisdata.LogKey(key, p.Name), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return zs
}
