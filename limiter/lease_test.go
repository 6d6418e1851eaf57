package limiter_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

func acquire(t testing.TB, lim *limiter.Limiter, key string, p limiter.Policy) limiter.Lease {
	t.Helper()
	l, err := lim.Acquire(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// acquireBurst sends n concurrent acquires at once, alternating between
// lims (two instances of the app on one Redis), and returns the answers.
func acquireBurst(t *testing.T, lims []*limiter.Limiter, n int, key string, p limiter.Policy) []limiter.Lease {
	t.Helper()
	out := make([]limiter.Lease, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i], errs[i] = lims[i%len(lims)].Acquire(context.Background(), key, p)
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

func held(ls []limiter.Lease) []limiter.Lease {
	var out []limiter.Lease
	for _, l := range ls {
		if l.Held {
			out = append(out, l)
		}
	}
	return out
}

// TestLeasesExactAcrossInstances: 200 concurrent acquires from two
// instances on 4/inflight hold exactly 4 leases, whose set holds exactly
// their 4 ids; the refused learn when the earliest lease ends; a release
// frees its slot at once, for the other instance too.
func TestLeasesExactAcrossInstances(t *testing.T) {
	url := redistest.RealURL(t)
	c := newClient(t, url)
	lims := []*limiter.Limiter{limiter.New(c), limiter.New(newClient(t, url), limiter.WithoutBatching())}
	p := mustPolicy(t, "jobs=4/inflight+lease=1m")
	key := uniqueKey(t)
	all := acquireBurst(t, lims, 200, key, p)
	got := held(all)
	if len(got) != 4 {
		t.Fatalf("%d of 200 concurrent acquires held a lease on 4/inflight", len(got))
	}
	ids := map[string]bool{}
	for _, l := range got {
		ids[l.ID] = true
		if l.ExpiresMs != l.NowMs+60_000 || l.Limit != 4 || l.InFlight < 1 || l.InFlight > 4 {
			t.Errorf("held lease %+v: want expiry now+60000, limit 4", l)
		}
	}
	zs := members(t, c, key, p)
	if len(zs) != 4 {
		t.Fatalf("the set holds %d members, want the 4 leases", len(zs))
	}
	var earliest int64 = 1 << 62
	for _, z := range zs {
		if !ids[z.Member.(string)] {
			t.Errorf("member %v is no lease granted", z.Member)
		}
		earliest = min(earliest, int64(z.Score))
	}
	for _, l := range all {
		if !l.Held && (l.ID != "" || l.InFlight != 4 || l.RetryAfterMs <= 0 || l.RetryAfterMs != earliest-l.NowMs) {
			t.Fatalf("refused acquire %+v: want no id, 4 in flight, retry until the earliest expiry %d", l, earliest)
		}
	}
	if ttl := c.PTTL(context.Background(), redisdata.LogKey(key, p.Name)).Val(); ttl <= 110*time.Second || ttl > 2*time.Minute {
		t.Errorf("the set's TTL is %v, want it to cover the latest lease (1m) and one lease time more", ttl)
	}

	r, err := lims[1].Release(context.Background(), key, p, got[0].ID)
	if err != nil || !r.Released || r.InFlight != 3 {
		t.Fatalf("release: %+v, %v", r, err)
	}
	if l := acquire(t, lims[0], key, p); !l.Held || l.InFlight != 4 {
		t.Fatalf("acquire right after a release on the other instance: %+v", l)
	}
	if l := acquire(t, lims[1], key, p); l.Held {
		t.Fatalf("a fifth lease: %+v", l)
	}
}

// TestLeaseReleaseIdempotent: releasing twice, or an id never granted,
// changes nothing and is no error.
func TestLeaseReleaseIdempotent(t *testing.T) {
	lim := limiter.New(newClient(t, redistest.RealURL(t)))
	p := mustPolicy(t, "jobs=2/inflight")
	key := uniqueKey(t)
	l := acquire(t, lim, key, p)
	other := acquire(t, lim, key, p)
	for i, want := range []bool{true, false} {
		r, err := lim.Release(context.Background(), key, p, l.ID)
		if err != nil || r.Released != want || r.InFlight != 1 {
			t.Fatalf("release %d: %+v, %v; want released %v, 1 in flight", i+1, r, err, want)
		}
	}
	r, err := lim.Release(context.Background(), key, p, "9b2f1c4e-3a5d-4e6f-8a7b-0c1d2e3f4a5b")
	if err != nil || r.Released || r.InFlight != 1 {
		t.Fatalf("release of an id never granted: %+v, %v", r, err)
	}
	if r, _ := lim.Renew(context.Background(), key, p, other.ID); !r.Held {
		t.Fatalf("the other lease after the releases: %+v", r)
	}
}

// TestLeaseExpiresAtItsEnd: a holder that never releases frees its slot when
// its lease ends, judged on Redis's clock: refused before, granted after,
// and the call that finds it expired reports it once; a renew after the end
// finds it gone.
func TestLeaseExpiresAtItsEnd(t *testing.T) {
	c := newClient(t, redistest.RealURL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "one=1/inflight+lease=1s")
	key := uniqueKey(t)
	first := acquire(t, lim, key, p)
	if !first.Held || first.ExpiresMs != first.NowMs+1000 {
		t.Fatalf("first lease: %+v", first)
	}
	for {
		l := acquire(t, lim, key, p)
		if l.NowMs < first.ExpiresMs {
			if l.Held || len(l.Expired) != 0 || l.RetryAfterMs != first.ExpiresMs-l.NowMs {
				t.Fatalf("at %d, before the lease's end %d: %+v", l.NowMs, first.ExpiresMs, l)
			}
			time.Sleep(time.Duration(min(l.RetryAfterMs, 50)) * time.Millisecond)
			continue
		}
		if !l.Held || len(l.Expired) != 1 || l.Expired[0].ID != first.ID || l.Expired[0].ExpiresMs != first.ExpiresMs {
			t.Fatalf("at %d, past the lease's end %d: %+v, want held and the first reported expired", l.NowMs, first.ExpiresMs, l)
		}
		if l.NowMs > first.ExpiresMs+50 {
			t.Logf("the machine is slow: first acquire after the end came %d ms late", l.NowMs-first.ExpiresMs)
		}
		break
	}
	r, err := lim.Renew(context.Background(), key, p, first.ID)
	if err != nil || r.Held || r.ExpiresMs != 0 {
		t.Fatalf("renew after the end: %+v, %v; want not held", r, err)
	}
}

// TestLeaseRenew: a renew moves the expiry to now plus the lease time and
// the set's TTL with it; the refused then wait for the renewed expiry.
func TestLeaseRenew(t *testing.T) {
	c := newClient(t, redistest.RealURL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "one=1/inflight+lease=2s")
	key := uniqueKey(t)
	first := acquire(t, lim, key, p)
	time.Sleep(1200 * time.Millisecond)
	r, err := lim.Renew(context.Background(), key, p, first.ID)
	if err != nil || !r.Held || r.ExpiresMs != r.NowMs+2000 || r.ExpiresMs <= first.ExpiresMs || r.InFlight != 1 {
		t.Fatalf("renew: %+v, %v", r, err)
	}
	if ttl := c.PTTL(context.Background(), redisdata.LogKey(key, p.Name)).Val(); ttl < 1500*time.Millisecond {
		t.Errorf("TTL %v after a renew: want it to cover the renewed lease", ttl)
	}
	// Past the first expiry, the renewed lease still holds the slot.
	for redisNow(t, c) <= first.ExpiresMs {
		time.Sleep(20 * time.Millisecond)
	}
	if l := acquire(t, lim, key, p); l.Held || l.RetryAfterMs != r.ExpiresMs-l.NowMs {
		t.Fatalf("acquire past the first expiry: %+v, want refused until %d", l, r.ExpiresMs)
	}
}

// TestLeaseBadInput: lease ids are validated, checks and peeks refuse an
// inflight policy, and leases refuse a windowed one.
func TestLeaseBadInput(t *testing.T) {
	lim := limiter.New(newClient(t, redistest.RealURL(t)))
	ctx := context.Background()
	p := mustPolicy(t, "jobs=2/inflight")
	key := uniqueKey(t)
	for _, id := range []string{"", "nope", "9B2F1C4E-3A5D-4E6F-8A7B-0C1D2E3F4A5B", "9b2f1c4e3a5d4e6f8a7b0c1d2e3f4a5b", strings.Repeat("a", 500)} {
		if _, err := lim.Renew(ctx, key, p, id); !errors.Is(err, limiter.ErrInvalidLeaseID) {
			t.Errorf("renew %q: %v", id, err)
		}
		if _, err := lim.Release(ctx, key, p, id); !errors.Is(err, limiter.ErrInvalidLeaseID) {
			t.Errorf("release %q: %v", id, err)
		}
	}
	if _, err := lim.Allow(ctx, key, p, 1); !errors.Is(err, limiter.ErrInFlight) {
		t.Errorf("check of an inflight policy: %v", err)
	}
	if _, err := lim.Peek(ctx, key, p, 1); !errors.Is(err, limiter.ErrInFlight) {
		t.Errorf("peek of an inflight policy: %v", err)
	}
	if _, err := lim.AllowEach(ctx, key, []limiter.Policy{p}, 1); !errors.Is(err, limiter.ErrInFlight) {
		t.Errorf("AllowEach with an inflight policy: %v", err)
	}
	if _, err := lim.Acquire(ctx, key, mustPolicy(t, "w=2/1m")); !errors.Is(err, limiter.ErrNotInFlight) {
		t.Errorf("acquire on a window policy: %v", err)
	}
	if _, err := lim.Acquire(ctx, "bad key", p); !errors.Is(err, limiter.ErrInvalidKey) {
		t.Errorf("acquire with a bad key: %v", err)
	}
}

// TestLeaseWindow: the window of an inflight key lists its live leases,
// earliest expiry first, with their start; a reset clears them.
func TestLeaseWindow(t *testing.T) {
	lim := limiter.New(newClient(t, redistest.RealURL(t)))
	ctx := context.Background()
	p := mustPolicy(t, "jobs=3/inflight+lease=10s")
	key := uniqueKey(t)
	a := acquire(t, lim, key, p)
	b := acquire(t, lim, key, p)
	w, err := lim.Window(ctx, key, p)
	if err != nil {
		t.Fatal(err)
	}
	if w.Algorithm != limiter.InFlight || w.Count != 2 || w.Limit != 3 || w.WindowMs != 10_000 || len(w.Leases) != 2 || len(w.Entries) != 0 {
		t.Fatalf("window: %+v", w)
	}
	want := map[limiter.LiveLease]bool{
		{ID: a.ID, StartMs: a.NowMs, ExpiresMs: a.ExpiresMs}: true,
		{ID: b.ID, StartMs: b.NowMs, ExpiresMs: b.ExpiresMs}: true,
	}
	if !want[w.Leases[0]] || !want[w.Leases[1]] || w.Leases[0] == w.Leases[1] || w.Leases[0].ExpiresMs > w.Leases[1].ExpiresMs {
		t.Fatalf("leases %+v, want %+v, the earliest expiry first", w.Leases, want)
	}
	if err := lim.Reset(ctx, key, p); err != nil {
		t.Fatal(err)
	}
	if w, _ := lim.Window(ctx, key, p); w.Count != 0 || len(w.Leases) != 0 {
		t.Fatalf("after a reset: %+v", w)
	}
}

// TestLeasesOnACluster: the lease scripts touch the one key of the window,
// so they run on a Redis Cluster, exactly.
func TestLeasesOnACluster(t *testing.T) {
	client := redistest.StartCluster(t).Client()
	lim := limiter.New(client)
	p := mustPolicy(t, "jobs=4/inflight")
	for i := range 3 {
		key := uniqueKey(t) + "-" + string(rune('a'+i))
		got := held(acquireBurst(t, []*limiter.Limiter{lim}, 50, key, p))
		if len(got) != 4 {
			t.Fatalf("%d leases held on 4/inflight", len(got))
		}
		if r, err := lim.Release(context.Background(), key, p, got[0].ID); err != nil || !r.Released {
			t.Fatalf("release: %+v, %v", r, err)
		}
		if r, err := lim.Renew(context.Background(), key, p, got[1].ID); err != nil || !r.Held {
			t.Fatalf("renew: %+v, %v", r, err)
		}
		ws, errs := lim.Windows(context.Background(), []limiter.WindowOf{{Key: key, Policy: p}})
		if errs[0] != nil || ws[0].Count != 3 {
			t.Fatalf("window: %+v, %v", ws, errs)
		}
	}
}

// TestParseInFlightPolicy: LIMIT/inflight with its lease time, default 30s,
// written back as read; mixed with windows or window options it is refused
// with a reason.
func TestParseInFlightPolicy(t *testing.T) {
	for s, want := range map[string]string{
		"jobs=4/inflight":                 "jobs=4/inflight+lease=30s",
		"jobs=4/inflight+lease=45s":       "jobs=4/inflight+lease=45s",
		"jobs = 4/inflight +lease=1500ms": "jobs=4/inflight+lease=1.5s",
		"jobs=100000/inflight@inflight":   "jobs=100000/inflight+lease=30s",
		"jobs=1/inflight+lease=24h":       "jobs=1/inflight+lease=24h",
		"jobs=1/inflight+lease=1s":        "jobs=1/inflight+lease=1s",
	} {
		p, err := limiter.ParsePolicy(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if !p.InFlight() || p.String() != want || len(p.Rules) != 1 || !p.Rules[0].InFlight {
			t.Errorf("%s: %+v, written %q, want %q", s, p, p.String(), want)
		}
		if back, err := limiter.ParsePolicy(p.String()); err != nil || back.String() != want {
			t.Errorf("round trip of %q: %v", want, err)
		}
	}
	for s, want := range map[string]string{
		"jobs=4/inflight,10/1m":       "cannot be mixed with window or quota rules",
		"jobs=10/day,4/inflight":      "cannot be mixed",
		"jobs=4/inflight,5/inflight":  "inflight appears twice",
		"jobs=4/inflight@gcra":        "drop @gcra",
		"jobs=4/inflight+shadow":      "+shadow",
		"jobs=4/inflight+lock=1m":     "+lock=",
		"jobs=4/inflight+tz=UTC":      "+tz=",
		"jobs=10/1m+lease=30s":        "+lease= applies to a LIMIT/inflight rule only",
		"jobs=10/1m@inflight":         "@inflight takes one rule LIMIT/inflight",
		"jobs=4/inflight+lease=500ms": "from 1s to 24h",
		"jobs=4/inflight+lease=25h":   "from 1s to 24h",
		"jobs=4/inflight+lease=1.5ms": "whole milliseconds",
		"jobs=4/inflight+lease":       "+lease",
		"jobs=0/inflight":             "from 1 to 100000",
		"jobs=100001/inflight":        "from 1 to 100000",
	} {
		_, err := limiter.ParsePolicy(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", s, err, want)
		}
	}
}
