package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// TestWaitUpTo: behind WaitUpTo a request the rules deny waits for its slot
// and then reaches the handler, never before the slot on Redis's clock; one
// whose context ends first never reaches it and its booking is refunded;
// a retry beyond the wait is denied at once.
func TestWaitUpTo(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t), limiter.WithDenyCache(0))
	p := mustPolicy(t, "mw=2/1s")
	key := "wait-" + uuid.NewString()[:8]
	var reached atomic.Int64
	var reachedAt atomic.Int64 // Redis's clock when the last request reached the handler
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		d, err := lim.Peek(r.Context(), key, p, 1)
		if err != nil {
			t.Error(err)
		}
		reachedAt.Store(d.NowMs)
	})
	var refunded atomic.Int64
	mw := httplimit.New(lim, httplimit.WithKey(func(r *http.Request) (string, error) { return key + r.URL.Query().Get("k"), nil }),
		httplimit.WithTimeout(generous),
		httplimit.WithHooks(httplimit.Hooks{Refund: func(a limiter.Adjustment, err error) {
			if err == nil && a.Was == 1 {
				refunded.Add(1)
			}
		}}))
	srv := httptest.NewServer(mw.Limit(p, httplimit.WaitUpTo(5*time.Second))(h))
	t.Cleanup(srv.Close)
	short := httptest.NewServer(mw.Limit(p, httplimit.WaitUpTo(5*time.Millisecond))(h))
	t.Cleanup(short.Close)

	for range 2 {
		if a := get(t, srv.URL); a.status != http.StatusOK {
			t.Fatalf("a request with room: %d %s", a.status, a.body)
		}
	}
	d, err := lim.Peek(context.Background(), key, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	slot := d.NowMs + d.RetryAfterMs // the first request's entry slides out
	if a := get(t, short.URL); a.status != http.StatusTooManyRequests {
		t.Fatalf("a wait shorter than the retry: %d, want 429", a.status)
	}
	if a := get(t, srv.URL); a.status != http.StatusOK || reached.Load() != 3 || reachedAt.Load() < slot {
		t.Fatalf("the waiting request: %d, reached %d, at %d; want 200, 3, at %d or later", a.status, reached.Load(), reachedAt.Load(), slot)
	}

	// One that gives up: its booking is refunded, the handler never runs.
	for range 2 {
		if a := get(t, srv.URL+"?k=2"); a.status != http.StatusOK {
			t.Fatalf("a request with room: %d %s", a.status, a.body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"?k=2", nil)
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request that gives up before its slot: %v", err)
	}
	deadline := time.Now().Add(generous)
	for refunded.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if refunded.Load() != 1 || reached.Load() != 5 {
		t.Fatalf("after a request gave up: %d refunds of its entry, %d reached; want 1, 5", refunded.Load(), reached.Load())
	}
	if d, err := lim.Peek(context.Background(), key+"2", p, 1); err != nil || d.Rules[0].Count != 2 {
		t.Fatalf("the window after a refunded booking: %+v %v, want the 2 entries of the requests served", d, err)
	}
}

// TestWaitUpToPanics: waiting on a policy that cannot book is a mistake
// found when the routes are built.
func TestWaitUpToPanics(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	mw := httplimit.New(lim)
	for _, c := range []struct {
		policy string
		wait   time.Duration
	}{{"b=2/1s@bucket", time.Second}, {"l=2/1s", 31 * time.Second}, {"l=2/1s", -time.Second}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("WaitUpTo(%v) on %s did not panic", c.wait, c.policy)
				}
			}()
			mw.Limit(mustPolicy(t, c.policy), httplimit.WaitUpTo(c.wait))
		}()
	}
}
