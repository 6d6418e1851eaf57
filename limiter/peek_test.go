package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestPeekRecordsNothing: under every algorithm a peek answers what Allow
// would answer for the same cost at that moment, and never changes the
// state: the window is the same before and after, and the allows after it
// go exactly as far as without it.
func TestPeekRecordsNothing(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c, limiter.WithoutBatching(), limiter.WithDenyCache(0))
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			p := mustPolicy(t, "peek=3/1h@"+string(alg))
			key := uniqueKey(t)
			awayFromBoundary(t, c, time.Hour.Milliseconds(), 5*time.Second)
			for i := 0; i < 3; i++ {
				d, err := lim.Peek(ctx, key, p, 1)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed || !d.Peek || d.ID != "" || d.Bound().Count != i {
					t.Fatalf("peek %d: %+v, want allowed, count %d, no id", i, d, i)
				}
				if d, err = lim.Peek(ctx, key, p, 3-i); err != nil || !d.Allowed {
					t.Fatalf("peek of cost %d with %d used: %+v %v, want allowed", 3-i, i, d, err)
				}
				if i > 0 {
					if d, err = lim.Peek(ctx, key, p, 3); err != nil || d.Allowed || d.RetryAfterMs <= 0 || !d.Bound().Violated {
						t.Fatalf("peek of cost 3 with %d used: %+v %v, want denied with a retry time", i, d, err)
					}
				}
				if d, err = lim.Allow(ctx, key, p, 1); err != nil || !d.Allowed || d.Bound().Count != i+1 {
					t.Fatalf("allow %d after peeks: %+v %v", i, d, err)
				}
			}
			d, err := lim.Peek(ctx, key, p, 1)
			if err != nil || d.Allowed || d.RetryAfterMs <= 0 || d.Bound().Remaining != 0 {
				t.Fatalf("peek at a full window: %+v %v, want denied", d, err)
			}
			if d, err = lim.Allow(ctx, key, p, 1); err != nil || d.Allowed {
				t.Fatalf("allow at a full window after a peek: %+v %v", d, err)
			}
			// Cost 0: is the window within its limit at all? A full one is.
			if d, err = lim.Peek(ctx, key, p, 0); err != nil || !d.Allowed || d.Bound().Count != 3 {
				t.Fatalf("peek of cost 0 at a full window: %+v %v", d, err)
			}
		})
	}
}

func TestPeekRefusesWhatAllowRefuses(t *testing.T) {
	lim := limiter.New(newClient(t, redistest.URL(t)))
	p := mustPolicy(t, "p=3/1m")
	if _, err := lim.Peek(context.Background(), "a b", p, 1); !errors.Is(err, limiter.ErrInvalidKey) {
		t.Fatalf("bad key: %v", err)
	}
	if _, err := lim.Peek(context.Background(), "k", p, 4); !errors.Is(err, limiter.ErrInvalidCost) {
		t.Fatalf("cost above the limit: %v", err)
	}
}

// TestCountDenied: a fixed window that counts every hit, as
// envoyproxy/ratelimit does. A denied cost is counted, so after a denial of
// cost 5 at 8 of 10 even a request of cost 1 is over until the window ends;
// a cost above the limit is taken, counted and denied; a peek of cost 0 is
// allowed until the count passes the limit.
func TestCountDenied(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c, limiter.WithoutBatching(), limiter.WithDenyCache(0))
	ctx := context.Background()
	p := mustPolicy(t, "envoy=10/1h@fixed")
	p.CountDenied = true
	key := uniqueKey(t)
	awayFromBoundary(t, c, time.Hour.Milliseconds(), 5*time.Second)
	if d, err := lim.Allow(ctx, key, p, 8); err != nil || !d.Allowed || d.Bound().Remaining != 2 {
		t.Fatalf("8 of 10: %+v %v", d, err)
	}
	if d, err := lim.Peek(ctx, key, p, 0); err != nil || !d.Allowed || d.Bound().Count != 8 {
		t.Fatalf("peek at 8: %+v %v", d, err)
	}
	d, err := lim.Allow(ctx, key, p, 5)
	if err != nil || d.Allowed || d.Bound().Count != 13 || d.Bound().Remaining != 0 || d.RetryAfterMs <= 0 {
		t.Fatalf("cost 5 at 8 of 10: %+v %v, want denied and counted (13)", d, err)
	}
	if d, err := lim.Allow(ctx, key, p, 1); err != nil || d.Allowed || d.Bound().Count != 14 {
		t.Fatalf("cost 1 after the counted denial: %+v %v, want denied (14)", d, err)
	}
	if d, err := lim.Peek(ctx, key, p, 0); err != nil || d.Allowed || d.Bound().Count != 14 || d.RetryAfterMs <= 0 {
		t.Fatalf("peek past the limit: %+v %v, want denied, nothing counted", d, err)
	}
	other := uniqueKey(t)
	if d, err := lim.Allow(ctx, other, p, 11); err != nil || d.Allowed || d.Bound().Count != 11 {
		t.Fatalf("cost 11 of 10: %+v %v, want taken, counted and denied", d, err)
	}
	if _, err := lim.Allow(ctx, other, p, limiter.MaxCountedCost+1); !errors.Is(err, limiter.ErrInvalidCost) {
		t.Fatalf("cost past MaxCountedCost: %v", err)
	}
	// Without CountDenied the same policy counts only what it allows.
	p.CountDenied = false
	plain := uniqueKey(t)
	lim.Allow(ctx, plain, p, 8)
	if d, err := lim.Allow(ctx, plain, p, 5); err != nil || d.Allowed || d.Bound().Count != 8 {
		t.Fatalf("plain fixed, cost 5 at 8: %+v %v", d, err)
	}
	if d, err := lim.Allow(ctx, plain, p, 1); err != nil || !d.Allowed {
		t.Fatalf("plain fixed, cost 1 at 8: %+v %v", d, err)
	}
}

// TestCountDeniedZeroLimit: a limit of 0 denies everything, counting it.
func TestCountDeniedZeroLimit(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c, limiter.WithoutBatching(), limiter.WithDenyCache(0))
	p := limiter.Policy{Name: "blocked", Rules: []limiter.Rule{{Limit: 0, Window: time.Minute}}, Algorithm: limiter.Fixed, CountDenied: true}
	key := uniqueKey(t)
	for i := 1; i <= 2; i++ {
		d, err := lim.Allow(context.Background(), key, p, 1)
		if err != nil || d.Allowed || d.Bound().Count != i || d.RetryAfterMs <= 0 || d.RetryAfterMs > 60_000 {
			t.Fatalf("check %d: %+v %v", i, d, err)
		}
	}
}

// TestCountDeniedNotCached: with the local deny cache serving, a CountDenied
// policy's denials still reach Redis and are counted, as
// envoyproxy/ratelimit counts them; the same policy without it is answered
// from the cache.
func TestCountDeniedNotCached(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := cachedLimiter(t, c)
	ctx := context.Background()
	awayFromBoundary(t, c, time.Hour.Milliseconds(), 5*time.Second)
	for _, counted := range []bool{true, false} {
		p := mustPolicy(t, "counted=1/1h@fixed")
		p.CountDenied = counted
		key := uniqueKey(t)
		lim.Allow(ctx, key, p, 1)
		for i := 2; i <= 4; i++ {
			d, err := lim.Allow(ctx, key, p, 1)
			if err != nil || d.Allowed {
				t.Fatalf("counted=%v, check %d: %+v %v", counted, i, d, err)
			}
			if counted && (d.Cached || d.Bound().Count != i) {
				t.Fatalf("check %d: cached %v, count %d, want counted in Redis (%d)", i, d.Cached, d.Bound().Count, i)
			}
			if !counted && i > 2 && !d.Cached {
				t.Fatalf("check %d of a plain fixed window: not from the cache", i)
			}
		}
	}
}

// TestPeekOfALogWithNothingExpiredWritesNothing: a peek of a log whose
// entries are all inside the window makes no write, so it is answered by a
// master that refuses writes (too few replicas), where a check fails.
func TestPeekOfALogWithNothingExpiredWritesNothing(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, redistest.Start(t).URL)
	lim := limiter.New(c)
	p := mustPolicy(t, "p=5/1m")
	key := uniqueKey(t)
	if _, err := lim.Allow(ctx, key, p, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	d, err := lim.Peek(ctx, key, p, 1)
	if err != nil {
		t.Fatalf("peek on a master refusing writes: %v", err)
	}
	if !d.Allowed || d.Rules[0].Count != 1 {
		t.Errorf("peek: %+v, want allowed with the one entry counted", d)
	}
	if _, err := lim.Allow(ctx, key, p, 1); err == nil {
		t.Error("a check was recorded on a master refusing writes: the test proves nothing")
	}
}
