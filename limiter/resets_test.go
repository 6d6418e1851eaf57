package limiter_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestDenyCacheResetFromAnotherInstance: a reset on instance B (its own
// Limiter and connections, on the same Redis) clears A's cached denial within
// 1 s — on a standalone Redis, a cluster and the embedded Redis — and B's own
// cache at once.
func TestDenyCacheResetFromAnotherInstance(t *testing.T) {
	cases := []struct {
		name    string
		clients func(t *testing.T) (redis.UniversalClient, redis.UniversalClient)
	}{
		{"standalone", func(t *testing.T) (redis.UniversalClient, redis.UniversalClient) {
			url := redistest.URL(t)
			return newClient(t, url), newClient(t, url)
		}},
		{"embedded", func(t *testing.T) (redis.UniversalClient, redis.UniversalClient) {
			url := redistest.EmbeddedURL(t)
			return newClient(t, url), newClient(t, url)
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, redis.UniversalClient) {
			c := redistest.StartCluster(t)
			return c.Client(), c.Client()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ca, cb := tc.clients(t)
			a, b := cachedLimiter(t, ca), cachedLimiter(t, cb)
			p := mustPolicy(t, "resets=2/1m")
			for round := range 3 {
				key := uniqueKey(t)
				fillUntilDenied(t, a, key, p)
				fillUntilDenied(t, b, key, p)
				if da, db := allow(t, a, key, p, 1), allow(t, b, key, p, 1); !da.Cached || !db.Cached {
					t.Fatalf("want both instances to answer from their caches: %+v, %+v", da, db)
				}
				if err := b.Reset(context.Background(), key, p); err != nil {
					t.Fatal(err)
				}
				reset := time.Now()
				if d := allow(t, b, key, p, 1); d.Cached || !d.Allowed {
					t.Fatalf("round %d: B's own reset left its cache answering: %+v", round, d)
				}
				for {
					d := allow(t, a, key, p, 1)
					if !d.Cached {
						if !d.Allowed {
							t.Fatalf("round %d: after the reset Redis denied A's check: %+v", round, d)
						}
						break
					}
					if since := time.Since(reset); since > time.Second {
						t.Fatalf("round %d: A's cache still answers %s after B's reset", round, since)
					}
					time.Sleep(2 * time.Millisecond)
				}
				t.Logf("round %d: A's cache cleared %s after B's reset returned", round, time.Since(reset).Round(time.Millisecond))
			}
		})
	}
}

// TestDenyCacheStopsWithoutItsSubscription: when the subscription to resets
// is lost the cache empties and stops answering; once back, it starts empty —
// a restarted, empty Redis is never answered from what the old one said.
func TestDenyCacheStopsWithoutItsSubscription(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.URL)
	lim := cachedLimiter(t, c)
	p := mustPolicy(t, "lost=1/1m")
	key := uniqueKey(t)

	fillUntilDenied(t, lim, key, p)
	if d := allow(t, lim, key, p, 1); !d.Cached {
		t.Fatalf("want a cached denial, got %+v", d)
	}
	srv.Pause() // nothing answers; the connections stay open
	waitServing(t, lim, false)
	if st := lim.DenyCacheStats(); st.Entries != 0 {
		t.Errorf("the cache kept %d entries without its subscription", st.Entries)
	}
	srv.Resume()
	waitServing(t, lim, true)
	if d := allow(t, lim, key, p, 1); d.Cached || d.Allowed {
		t.Fatalf("after the subscription came back: want Redis's denial, got %+v", d)
	}
	if d := allow(t, lim, key, p, 1); !d.Cached {
		t.Fatalf("want the new denial cached, got %+v", d)
	}

	srv.Stop()
	waitServing(t, lim, false)
	srv.Restart() // empty: the window is gone
	waitServing(t, lim, true)
	if d := allow(t, lim, key, p, 1); d.Cached || !d.Allowed {
		t.Fatalf("on the restarted, empty Redis: want Redis to allow, got %+v", d)
	}
}

// TestDenyCacheOnlyWithRun: a Limiter whose Run is not running never answers
// from its cache; Run returns at once when the cache is off and refuses to
// run twice.
func TestDenyCacheOnlyWithRun(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	p := mustPolicy(t, "norun=1/1m")
	lim := limiter.New(c)
	key := uniqueKey(t)
	fillUntilDenied(t, lim, key, p)
	if d := allow(t, lim, key, p, 1); d.Cached {
		t.Errorf("cached without Run: %+v", d)
	}
	if st := lim.DenyCacheStats(); st.Entries != 0 || st.Serving || st.Size != limiter.DefaultDenyCacheSize {
		t.Errorf("stats without Run: %+v", st)
	}

	if err := direct(c).Run(context.Background()); err != nil {
		t.Errorf("Run without a cache: %v", err)
	}
	serve(t, lim)
	if err := lim.Run(context.Background()); err == nil {
		t.Error("a second Run did not fail")
	}
	allow(t, lim, key, p, 1)
	if d := allow(t, lim, key, p, 1); !d.Cached {
		t.Errorf("with Run: want a cached denial, got %+v", d)
	}
}

// TestDenyCachePolicyChanged: a denial made under one definition of a policy
// is never the answer under another (a reload), and Forget drops a policy's
// entries.
func TestDenyCachePolicyChanged(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := cachedLimiter(t, c)
	before, after := mustPolicy(t, "changed=2/1m"), mustPolicy(t, "changed=5/1m")
	key := uniqueKey(t)
	fillUntilDenied(t, lim, key, before)
	if d := allow(t, lim, key, before, 1); !d.Cached {
		t.Fatalf("want a cached denial, got %+v", d)
	}
	if d := allow(t, lim, key, after, 1); d.Cached || !d.Allowed || d.Bound().Count != 3 {
		t.Fatalf("under the raised limit: want Redis to allow the third, got %+v", d)
	}
	for _, s := range []string{"changed=2/1m@fixed", "changed=2/1m+shadow", "changed=2/1m,100/1h"} {
		other := mustPolicy(t, s)
		if d := allow(t, lim, key, other, 1); d.Cached {
			t.Errorf("%s answered from a denial made under %s: %+v", other, before, d)
		}
	}
	if d := allow(t, lim, key, before, 1); d.Cached || d.Allowed {
		t.Fatalf("back under %s: want Redis's denial, got %+v", before, d)
	}
	other := uniqueKey(t)
	fillUntilDenied(t, lim, other, mustPolicy(t, "kept=1/1m"))
	if st := lim.DenyCacheStats(); st.Entries != 2 {
		t.Fatalf("want 2 entries, got %+v", st)
	}
	lim.Forget("changed")
	if st := lim.DenyCacheStats(); st.Entries != 1 {
		t.Errorf("after Forget: %+v, want only the other policy's entry", st)
	}
	if d := allow(t, lim, key, before, 1); d.Cached {
		t.Errorf("answered from a forgotten entry: %+v", d)
	}
}

// TestDenyCacheConcurrent runs checks, resets from this and another
// instance, Forget and stats at once (for the race detector): a cached answer
// is always a denial, and between two resets no more are allowed than the
// limit.
func TestDenyCacheConcurrent(t *testing.T) {
	url := redistest.URL(t)
	a, b := cachedLimiter(t, newClient(t, url)), cachedLimiter(t, newClient(t, url))
	p := mustPolicy(t, "conc=3/1m")
	keys := []string{uniqueKey(t), uniqueKey(t), uniqueKey(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var rw sync.RWMutex // checks hold it to read, resets to write: each reset starts a count afresh
	var mu sync.Mutex   // guards allowed
	allowed := make([]int, len(keys))
	for g := range 8 {
		wg.Go(func() {
			lim := []*limiter.Limiter{a, b}[g%2]
			for i := 0; ctx.Err() == nil; i++ {
				k := i % len(keys)
				rw.RLock()
				d, err := lim.Allow(ctx, keys[k], p, 1+i%2)
				if err == nil && d.Allowed {
					mu.Lock()
					allowed[k] += d.Cost
					mu.Unlock()
				}
				rw.RUnlock()
				if err != nil {
					// The run's end: go-redis can see the deadline on its
					// socket a moment before ctx reports it.
					if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
						t.Error(err)
					}
					return
				}
				if d.Cached && d.Allowed {
					t.Errorf("a cached answer allowed: %+v", d)
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			time.Sleep(20 * time.Millisecond)
			k := i % len(keys)
			rw.Lock()
			mu.Lock()
			if allowed[k] > 3 {
				t.Errorf("key %d: %d allowed between two resets, limit 3", k, allowed[k])
			}
			allowed[k] = 0
			mu.Unlock()
			err := []*limiter.Limiter{a, b}[i%2].Reset(context.Background(), keys[k], p)
			rw.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			if i%5 == 0 {
				a.Forget(p.Name)
			}
			_ = b.DenyCacheStats()
		}
	})
	wg.Wait()
	if st := a.DenyCacheStats(); st.Denials == 0 {
		t.Errorf("the cache answered nothing: %+v", st)
	}
}

// TestDenyCacheResetsStayInTheirDatabase: two deployments on databases 0 and
// 1 of one redis-server share no resets — a reset on database 1 leaves
// database 0's cached denial answering — while a reset on database 0 still
// reaches its own deployment's caches. On a real redis-server.
func TestDenyCacheResetsStayInTheirDatabase(t *testing.T) {
	srv := redistest.Start(t)
	db := func(n string) *redis.Client { return newClient(t, "redis://"+srv.Addr+"/"+n) }
	a, other, same := cachedLimiter(t, db("0")), cachedLimiter(t, db("1")), cachedLimiter(t, db("0"))
	p := mustPolicy(t, "resets=2/1m")
	key := uniqueKey(t)
	fillUntilDenied(t, a, key, p)
	fillUntilDenied(t, other, key, p)
	if err := other.Reset(context.Background(), key, p); err != nil {
		t.Fatal(err)
	}
	// Database 1's reset has had far longer than the Pub/Sub delay when the
	// last of these checks runs.
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if d := allow(t, a, key, p, 1); !d.Cached {
			t.Fatalf("a reset on database 1 cleared database 0's cached denial: %+v", d)
		}
	}
	if err := same.Reset(context.Background(), key, p); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for allow(t, a, key, p, 1).Cached {
		if time.Now().After(deadline) {
			t.Fatal("a reset on database 0 did not clear database 0's cache within 1 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
