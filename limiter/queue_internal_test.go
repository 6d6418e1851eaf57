package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
)

// queuedLimiter is a Limiter on a real Redis whose batcher may send one
// pipeline at a time, with that one slot taken, as by a pipeline in flight:
// every check queues until release sends the queue.
func queuedLimiter(t *testing.T) (l *Limiter, release func()) {
	t.Helper()
	opt, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	l = New(rdb, WithBatching(DefaultMaxBatch, 1))
	b := l.batch
	b.mu.Lock()
	b.inFlight = b.maxInFlight
	b.mu.Unlock()
	// The slot passes to a runner, which frees it when the queue is empty.
	return l, func() { go b.drain() }
}

// waitQueued waits until n checks are queued.
func waitQueued(t *testing.T, l *Limiter, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		l.batch.mu.Lock()
		got := len(l.batch.queue)
		l.batch.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d checks queued after 10 s, want %d", got, n)
		}
	}
}

// TestQueueingIsNotRedisTime: a check that waits in the queue longer than
// its round-trip bound — behind pipelines in flight, as on a CPU-starved
// machine — is still decided when Redis then answers it in time: the bound
// counts from when the check is sent.
func TestQueueingIsNotRedisTime(t *testing.T) {
	l, release := queuedLimiter(t)
	p, err := ParsePolicy("queued=5/1m")
	if err != nil {
		t.Fatal(err)
	}
	const roundTrip = time.Second
	type answer struct {
		d   Decision
		err error
	}
	got := make(chan answer, 1)
	go func() {
		d, err := l.AllowWithin(context.Background(), Within{RoundTrip: roundTrip, Total: time.Minute}, "q-"+uuid.NewString(), p, 1)
		got <- answer{d, err}
	}()
	waitQueued(t, l, 1)
	time.Sleep(roundTrip + roundTrip/2) // queued for longer than its bound
	release()
	a := <-got
	if a.err != nil || !a.d.Allowed {
		t.Fatalf("a check queued for %v, then answered by Redis: %+v, %v; want it allowed", roundTrip+roundTrip/2, a.d, a.err)
	}
}

// TestTotalBoundsTheQueue: Within.Total bounds a check however long it
// queues, so a caller that promises an answer within it keeps the promise.
func TestTotalBoundsTheQueue(t *testing.T) {
	l, release := queuedLimiter(t)
	defer release()
	p, err := ParsePolicy("queued=5/1m")
	if err != nil {
		t.Fatal(err)
	}
	const total = 200 * time.Millisecond
	start := time.Now()
	_, err = l.AllowWithin(context.Background(), Within{RoundTrip: total, Total: total}, "q-"+uuid.NewString(), p, 1)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took < total || took > total+5*time.Second {
		t.Fatalf("a check queued without end: %v after %v; want context.DeadlineExceeded after %v", err, took, total)
	}
}
