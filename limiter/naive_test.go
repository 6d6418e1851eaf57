package limiter_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestNaiveOvershoots shows why the Lua script exists: with every request
// reading before any writes (the barrier), check-then-act lets all of them
// through, not the limit.
func TestNaiveOvershoots(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	naive := limiter.NewNaive(c)
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
			ok, err := naive.Allow(context.Background(), key, p, limiter.NaiveOptions{
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
		if ok, err := naive.Allow(context.Background(), key, p, limiter.NaiveOptions{}); err != nil {
			t.Fatal(err)
		} else if ok {
			seq++
		}
	}
	if seq != 5 {
		t.Fatalf("sequential naive allowed %d, want 5", seq)
	}
}
