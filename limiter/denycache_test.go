package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/internal/testload"
	"github.com/ratescope/ratescope/limiter"
)

// serve runs lim's subscription to resets until the test ends and waits
// until its deny cache serves.
func serve(t testing.TB, lim *limiter.Limiter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lim.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return 10 s after its context ended")
		}
	})
	waitServing(t, lim, true)
}

func waitServing(t testing.TB, lim *limiter.Limiter, want bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for lim.DenyCacheStats().Serving != want {
		if time.Now().After(deadline) {
			t.Fatalf("the deny cache's Serving did not become %v within 15 s", want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cachedLimiter is a Limiter whose deny cache serves; direct is one on the
// same Redis without a cache, whose every answer is Redis's.
// servingLost watches lim's deny cache and reports whether it stopped
// serving (its subscription to resets lost, so it emptied) at any time since
// the call: on a loaded machine a ping may go unanswered for the half second
// the limiter allows, and then what the cache held is gone, by design.
func servingLost(t testing.TB, lim *limiter.Limiter) func() bool {
	t.Helper()
	var lost atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if !lim.DenyCacheStats().Serving {
				lost.Store(true)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return lost.Load
}

func cachedLimiter(t testing.TB, c redis.UniversalClient, opts ...limiter.Option) *limiter.Limiter {
	t.Helper()
	lim := limiter.New(c, opts...)
	serve(t, lim)
	return lim
}

func direct(c redis.UniversalClient) *limiter.Limiter {
	return limiter.New(c, limiter.WithDenyCache(0))
}

func allow(t testing.TB, lim *limiter.Limiter, key string, p limiter.Policy, cost int) limiter.Decision {
	t.Helper()
	d, err := lim.Allow(context.Background(), key, p, cost)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fillUntilDenied checks cost 1 until Redis denies one; that denial.
func fillUntilDenied(t testing.TB, lim *limiter.Limiter, key string, p limiter.Policy) limiter.Decision {
	t.Helper()
	for range 50 {
		if d := allow(t, lim, key, p, 1); !d.Allowed {
			if d.Cached {
				t.Fatal("the first denial came from the cache")
			}
			return d
		}
	}
	t.Fatal("50 checks were all allowed")
	return limiter.Decision{}
}

// TestDenyCacheRetryWithinRoundTrip: a cached denial's retry is never
// shorter than the answer Redis gives just after it (a client that waits it
// out is not denied by the same window), and longer by no more than the
// time between the two plus the round trip of the denial the cache repeats;
// the deadline itself (NowMs + RetryAfterMs) is Redis's, exactly.
func TestDenyCacheRetryWithinRoundTrip(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim, ref := cachedLimiter(t, c), direct(c)
	p := mustPolicy(t, "rtt=3/3s")
	key := uniqueKey(t)
	sent0 := time.Now()
	d0 := fillUntilDenied(t, lim, key, p)
	rtt0 := time.Since(sent0) // at most the round trip of the denial itself, and then some
	deadline := d0.NowMs + d0.RetryAfterMs

	for i := range 10 {
		sent := time.Now()
		d := allow(t, lim, key, p, 1)
		r := allow(t, ref, key, p, 1)
		since := time.Since(sent)
		if r.Allowed || r.Cached || !d.Cached || d.Allowed || d.ID != "" {
			t.Fatalf("#%d: cache %+v, Redis %+v: want a denial from each", i, d, r)
		}
		if d.RetryAfterMs < r.RetryAfterMs {
			t.Errorf("#%d: cached retry %d ms is shorter than Redis's %d ms, answered after it", i, d.RetryAfterMs, r.RetryAfterMs)
		}
		if slack := (since + rtt0).Milliseconds() + 2; d.RetryAfterMs-r.RetryAfterMs > slack {
			t.Errorf("#%d: cached retry %d ms is %d ms longer than Redis's %d, more than the %d ms round trips", i, d.RetryAfterMs, d.RetryAfterMs-r.RetryAfterMs, r.RetryAfterMs, slack)
		}
		if d.NowMs+d.RetryAfterMs != deadline || r.NowMs+r.RetryAfterMs != deadline {
			t.Errorf("#%d: deadlines cache %d, Redis %d, first denial %d: want one", i, d.NowMs+d.RetryAfterMs, r.NowMs+r.RetryAfterMs, deadline)
		}
		b := d.Bound()
		if d.Key != key || d.Policy != p.Name || d.Cost != 1 || !b.Violated || b.RetryMs != d.RetryAfterMs || b.Count != 3 || b.Remaining != 0 {
			t.Errorf("#%d: cached decision %+v, binding rule %+v", i, d, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := lim.DenyCacheStats(); st.Denials != 10 || st.Entries != 1 || st.Size != limiter.DefaultDenyCacheSize {
		t.Errorf("stats %+v: want 10 denials from 1 entry of %d", st, limiter.DefaultDenyCacheSize)
	}
}

// TestDenyCacheNeverOutlivesTheTrueRetry, for every algorithm: every cached
// denial is answered while Redis's clock is still before the first moment a
// request of cost 1 fits, and tells a wait no shorter than what is left of
// it; the cache answers until close to that moment, and the first answer
// that is not cached comes from Redis: allowed exactly when Redis's clock has
// reached it.
func TestDenyCacheNeverOutlivesTheTrueRetry(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := cachedLimiter(t, c)
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			p := mustPolicy(t, "outlive=3/2s@"+string(alg))
			key := uniqueKey(t)
			lost := servingLost(t, lim)
			filling := time.Now()
			d0 := fillUntilDenied(t, lim, key, p)
			// The cache ends early by the denial's round trip, at most the
			// whole fill; the test sees its end one loop step late at most.
			fillTook, step := time.Since(filling), time.Duration(0)
			deadline := d0.NowMs + d0.RetryAfterMs
			cached, lastCachedAt := 0, int64(0)
			for {
				stepStart := time.Now()
				before := redisNow(t, c)
				d := allow(t, lim, key, p, 1)
				step = max(step, time.Since(stepStart))
				if d.Cached {
					cached++
					lastCachedAt = before
					if before >= deadline {
						t.Fatalf("a cached denial at Redis time %d, at or after the retry deadline %d", before, deadline)
					}
					after := redisNow(t, c)
					if d.RetryAfterMs < deadline-after || d.NowMs+d.RetryAfterMs != deadline || d.Allowed {
						t.Fatalf("cached %+v between Redis times %d and %d: want a wait of at least %d ms and NowMs + RetryAfterMs = %d", d, before, after, deadline-after, deadline)
					}
					continue
				}
				if d.Allowed != (d.NowMs >= deadline) {
					t.Fatalf("Redis answered %+v at %d, deadline %d: allowed must mean the deadline has come", d, d.NowMs, deadline)
				}
				if d.Allowed {
					break
				}
				// The cache expired a round trip early; Redis denies again,
				// with the same deadline, and the cache keeps that.
				if d.NowMs+d.RetryAfterMs != deadline {
					t.Fatalf("Redis's later denial %+v moved the deadline from %d", d, deadline)
				}
			}
			// Close: within 500 ms, more on a machine whose round trips are
			// slower (the embedded Redis on busy cores).
			if close := 500 + (fillTook + 2*step).Milliseconds(); cached == 0 || deadline-lastCachedAt > close {
				if lost() {
					testload.Skip(t, fmt.Sprintf("the cache lost its subscription during the test (a ping unanswered for 500 ms: the machine is too busy to measure this); %d cached answers", cached))
				}
				t.Errorf("%d cached answers, the last at %d ms before the deadline: want the cache to answer until close to it (%d ms: 500 + the fill's %v + two steps of %v)", cached, deadline-lastCachedAt, close, fillTook, step)
			}
		})
	}
}

// TestDenyCacheExpiryGoesToRedis: a request sent the moment the cache's
// retry runs out is decided by Redis, and allowed when the log allows it.
func TestDenyCacheExpiryGoesToRedis(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := cachedLimiter(t, c)
	p := mustPolicy(t, "expiry=2/1s")
	key := uniqueKey(t)
	d0 := fillUntilDenied(t, lim, key, p)
	deadline := d0.NowMs + d0.RetryAfterMs
	d := allow(t, lim, key, p, 1)
	at := time.Now()
	if !d.Cached {
		t.Fatalf("want a cached denial, got %+v", d)
	}
	time.Sleep(time.Until(at.Add(time.Duration(d.RetryAfterMs+1) * time.Millisecond)))
	for {
		e := allow(t, lim, key, p, 1)
		if e.Cached {
			t.Fatalf("the cache answered %+v after its own retry had run out", e)
		}
		if e.Allowed != (e.NowMs >= deadline) {
			t.Fatalf("Redis answered %+v; the log allows from %d", e, deadline)
		}
		if e.Allowed {
			return
		}
		time.Sleep(time.Duration(e.RetryAfterMs) * time.Millisecond)
	}
}

// TestDenyCacheCost: a denial with room left for cost 1 is not cached; one
// without room answers cost 1 and its own cost from the cache, each with the
// retry Redis gives that cost, and asks Redis for any other cost.
func TestDenyCacheCost(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	ref := direct(c)
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			lim := cachedLimiter(t, c)
			p := mustPolicy(t, "costs=5/1m@"+string(alg))
			key := uniqueKey(t)
			if alg == limiter.Fixed || alg == limiter.Counter {
				awayFromBoundary(t, c, 60_000, 10*time.Second) // all in one aligned minute
			}
			// 3 used, in two steps: the log's oldest entry and its third
			// differ, and so do its retries for cost 1 and cost 3.
			if d := allow(t, lim, key, p, 1); !d.Allowed {
				t.Fatalf("cost 1 on an empty window: %+v", d)
			}
			time.Sleep(5 * time.Millisecond)
			if d := allow(t, lim, key, p, 2); !d.Allowed {
				t.Fatalf("cost 2 with 4 left: %+v", d)
			}
			for i := range 3 {
				if d := allow(t, lim, key, p, 3); d.Allowed || d.Cached {
					t.Fatalf("#%d: cost 3 with 2 left: want Redis's denial, got %+v", i, d)
				}
			}
			if st := lim.DenyCacheStats(); st.Entries != 0 {
				t.Fatalf("a cost-3 denial with room for 1 was cached: %+v", st)
			}
			allow(t, lim, key, p, 1)
			allow(t, lim, key, p, 1)
			if d := allow(t, lim, key, p, 3); d.Allowed || d.Cached {
				t.Fatalf("cost 3 on a full window: want Redis's denial, got %+v", d)
			}
			for _, cost := range []int{3, 1} {
				d := allow(t, lim, key, p, cost)
				r := allow(t, ref, key, p, cost)
				if !d.Cached || d.Allowed || d.Cost != cost || d.RetryAfterMs < r.RetryAfterMs || d.RetryAfterMs-r.RetryAfterMs > 1000 ||
					d.NowMs+d.RetryAfterMs != r.NowMs+r.RetryAfterMs {
					t.Errorf("cost %d: cached %+v, Redis %+v: want the same deadline from the cache", cost, d, r)
				}
			}
			if d := allow(t, lim, key, p, 2); d.Cached || d.Allowed {
				t.Errorf("cost 2, whose retry the cache does not know: want Redis's denial, got %+v", d)
			}
			r := allow(t, ref, key, p, 2)
			if d := allow(t, lim, key, p, 2); !d.Cached || d.NowMs+d.RetryAfterMs != r.NowMs+r.RetryAfterMs {
				t.Errorf("cost 2 after Redis denied it: want it cached with Redis's deadline, got %+v (Redis %+v)", d, r)
			}
		})
	}
}

// TestDenyCacheMultiRule: the cache knows which rules have no room for cost
// 1 and reports each rule's own retry, moved on by the time since.
func TestDenyCacheMultiRule(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := cachedLimiter(t, c)
	p := mustPolicy(t, "multi=2/2s,3/1m")
	key := uniqueKey(t)
	allow(t, lim, key, p, 1)
	allow(t, lim, key, p, 1)
	time.Sleep(2100 * time.Millisecond)
	if d := allow(t, lim, key, p, 1); !d.Allowed { // the 1m rule is full now, the 2s one has room
		t.Fatalf("the third request, 2.1 s on: %+v", d)
	}
	d0 := fillUntilDenied(t, lim, key, p)
	if d0.Rules[0].Violated || !d0.Rules[1].Violated {
		t.Fatalf("want only the 1m rule violated: %+v", d0)
	}
	d := allow(t, lim, key, p, 1)
	if !d.Cached || len(d.Rules) != 2 {
		t.Fatalf("want a cached denial, got %+v", d)
	}
	for i, r := range d.Rules {
		r0 := d0.Rules[i]
		shift := d.NowMs - d0.NowMs
		if r.Violated != r0.Violated || r.RetryMs != max(0, r0.RetryMs-shift) || r.Count != r0.Count || r.ResetMs != max(0, r0.ResetMs-shift) {
			t.Errorf("rule %d: cached %+v, Redis's %+v, %d ms later", i, r, r0, shift)
		}
	}
	if d.Binding != d0.Binding || d.Bound().WindowMs != 60_000 {
		t.Errorf("binding rule %d (%+v): want the full 1m rule", d.Binding, d.Bound())
	}
}

// TestDenyCacheBound: the cache never holds more than its size, evicts the
// least recently used, and counts what it answers.
func TestDenyCacheBound(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	// An hour: no entry's retry runs out during the test, however slow.
	p := mustPolicy(t, "bound=1/1h")
	for _, size := range []int{7, 1100} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			lim := cachedLimiter(t, c, limiter.WithDenyCache(size))
			lost := servingLost(t, lim)
			prefix := uniqueKey(t)
			keys := 2*size + 5
			var wg sync.WaitGroup
			sem := make(chan struct{}, 32)
			for i := range keys {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					key := fmt.Sprintf("%s-%d", prefix, i)
					allow(t, lim, key, p, 1)
					allow(t, lim, key, p, 1)
					if st := lim.DenyCacheStats(); st.Entries > size {
						t.Errorf("%d entries, above the bound %d", st.Entries, size)
					}
				})
			}
			wg.Wait()
			// Sharded (from 1,024 on), each shard is full only nearly surely.
			if st := lim.DenyCacheStats(); st.Entries > size || st.Entries < size*9/10 || st.Size != size {
				if st.Entries <= size && lost() {
					testload.Skip(t, fmt.Sprintf("after %d denials: %+v; the cache lost its subscription meanwhile and started empty (a ping unanswered for 500 ms: the machine is too busy to fill it)", keys, st))
				}
				t.Fatalf("after %d denials: %+v, want it full at %d", keys, st, size)
			}
			if size > 7 {
				return
			}
			// One shard is an exact LRU: touch first and second (Redis denies
			// each again if it was evicted; either way each is recent now),
			// then first again; size-1 newer denials evict second, not first.
			first, second := prefix+"-0", prefix+"-1"
			allow(t, lim, first, p, 1)
			allow(t, lim, second, p, 1)
			if d := allow(t, lim, first, p, 1); !d.Cached {
				if lost() {
					testload.Skip(t, "the cache lost its subscription during the test (the machine is too busy)")
				}
				t.Fatalf("%s was just denied and is not cached: %+v", first, d)
			}
			for i := range size - 1 {
				k := fmt.Sprintf("%s-new-%d", prefix, i)
				allow(t, lim, k, p, 1)
				allow(t, lim, k, p, 1)
			}
			if d := allow(t, lim, first, p, 1); !d.Cached && !lost() {
				t.Errorf("the most recently used key was evicted: %+v", d)
			}
			if d := allow(t, lim, second, p, 1); d.Cached {
				t.Errorf("the least recently used key survived %d newer ones", size-1)
			}
			if st := lim.DenyCacheStats(); st.Entries > size || st.Denials == 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestAllowWithin: the timeout bounds only what Redis does. While Redis does
// not answer at all, a check the deny cache knows is still answered, from the
// cache, and any other fails with context.DeadlineExceeded after the timeout.
func TestAllowWithin(t *testing.T) {
	proxy := redistest.StartProxy(t, redistest.URL(t))
	c := newClient(t, proxy.URL)
	lim := cachedLimiter(t, c)
	p := mustPolicy(t, "within=2/1m")
	key := uniqueKey(t)
	fillUntilDenied(t, lim, key, p)

	proxy.Pause()
	defer proxy.Resume()
	ctx := context.Background()
	d, err := lim.AllowWithin(ctx, limiter.Within{RoundTrip: 50 * time.Millisecond}, key, p, 1)
	if err != nil || !d.Cached || d.Allowed {
		t.Fatalf("a known full window while Redis hangs: %+v, %v; want a cached denial", d, err)
	}
	start := time.Now()
	_, err = lim.AllowWithin(ctx, limiter.Within{RoundTrip: 50 * time.Millisecond}, uniqueKey(t), p, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a fresh key while Redis hangs: %v; want context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before its timeout", took)
	}
}

// TestDenyCacheWaitOutAStall: Redis runs a denied check 300 ms after it was
// sent. The cache's answer that follows tells a wait counted from when that
// denial came back, so a client that waits exactly that long, and no more,
// is allowed — as it is after waiting out Redis's own answer.
func TestDenyCacheWaitOutAStall(t *testing.T) {
	s := redistest.Start(t) // its own: the stall holds every client of it
	c := newClient(t, s.URL)
	lim, ref := cachedLimiter(t, c), direct(c)
	p := mustPolicy(t, "stall=3/2s")
	for round := range 3 {
		key := uniqueKey(t)
		for range 3 {
			if d := allow(t, lim, key, p, 1); !d.Allowed {
				t.Fatalf("round %d: filling: %+v", round, d)
			}
		}
		s.Stall(300 * time.Millisecond)
		d0 := allow(t, lim, key, p, 1)
		d := allow(t, lim, key, p, 1)
		got := time.Now()
		if d0.Allowed || d0.Cached {
			t.Fatalf("round %d: the check during the stall: %+v, want Redis's denial", round, d0)
		}
		if !d.Cached {
			if !lim.DenyCacheStats().Serving {
				continue // the stall cost the cache its subscription: try again
			}
			t.Fatalf("round %d: the check after the stalled denial: %+v, want a cached one", round, d)
		}
		time.Sleep(time.Until(got.Add(time.Duration(d.RetryAfterMs) * time.Millisecond)))
		if e := allow(t, ref, key, p, 1); !e.Allowed {
			t.Fatalf("round %d: waited the cached %d ms (Redis had said %d ms), then Redis denied again: %d ms short",
				round, d.RetryAfterMs, d0.RetryAfterMs, e.RetryAfterMs)
		}
		return
	}
	testload.Skip(t, "the cache lost its subscription in every stall: the machine is too busy to measure this")
}
