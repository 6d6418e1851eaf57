package limiter_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestAlgorithmsAllOrNothing: with two rules, a request the short rule
// refuses consumes nothing from the long one, and the binding rule is the one
// that refused; the retry is the refusing rule's.
func TestAlgorithmsAllOrNothing(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	ctx := context.Background()
	for _, alg := range stateAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			p := mustPolicy(t, "m=3/1h,5/2h@"+string(alg))
			awayFromBoundary(t, c, 2*3_600_000, 5*time.Second)
			key := uniqueKey(t)
			check := func(cost int) limiter.Decision {
				t.Helper()
				d, err := lim.Allow(ctx, key, p, cost)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			if d := check(2); !d.Allowed || d.Rules[0].Count != 2 || d.Rules[1].Count != 2 || d.Binding != 0 {
				t.Fatalf("first: %+v", d)
			}
			before := stateOf(t, c, key, p)
			d := check(2) // 2+2 > 3 for the hour; 2+2 <= 5 for two hours
			if d.Allowed || !d.Rules[0].Violated || d.Rules[1].Violated || d.Binding != 0 {
				t.Fatalf("second: %+v", d)
			}
			if d.RetryAfterMs != d.Rules[0].RetryMs || d.RetryAfterMs <= 0 || d.Rules[1].RetryMs != 0 {
				t.Fatalf("second: retry %d, rules %+v", d.RetryAfterMs, d.Rules)
			}
			if after := stateOf(t, c, key, p); !maps.Equal(before, after) {
				t.Fatalf("the denial changed the state: %v -> %v", before, after)
			}
			// Cost 1 still fits both: 3 of 3 and 3 of 5; the hour binds.
			if d := check(1); !d.Allowed || d.Rules[0].Remaining != 0 || d.Rules[1].Remaining != 2 || d.Binding != 0 {
				t.Fatalf("third: %+v", d)
			}
		})
	}
}

// TestAlgorithmsLargeNumbers: the largest limit over the longest window keeps
// every product near 6·10^15, where doubles still hold integers exactly. A
// whole burst of 10^7 passes at once and the next request waits exactly the
// emission interval, 604,800,000 / 10^7 = 60.48 ms, rounded up to 61.
func TestAlgorithmsLargeNumbers(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	ctx := context.Background()
	for _, alg := range stateAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			p := mustPolicy(t, "big=10000000/168h@"+string(alg))
			awayFromBoundary(t, c, p.Rules[0].WindowMs(), 5*time.Second)
			key := uniqueKey(t)
			d, err := lim.Allow(ctx, key, p, 10_000_000)
			if err != nil || !d.Allowed || d.Bound().Remaining != 0 || d.Bound().Count != 10_000_000 {
				t.Fatalf("%+v %v", d, err)
			}
			first := d.NowMs
			d, err = lim.Allow(ctx, key, p, 1)
			if err != nil || d.Allowed {
				t.Fatalf("%+v %v", d, err)
			}
			var want int64
			switch alg {
			case limiter.Fixed:
				want = align(first, 604_800_000) + 604_800_000 - d.NowMs
			case limiter.Counter:
				// In the next window the whole previous count weighs in
				// until ⌈w/l⌉ ms of it are gone.
				want = align(first, 604_800_000) + 604_800_000 + 61 - d.NowMs
			default:
				want = first + 61 - d.NowMs
			}
			if d.RetryAfterMs != want {
				t.Fatalf("RetryAfterMs = %d, want %d", d.RetryAfterMs, want)
			}
		})
	}
}

// TestAlgorithmsWindowAndReset: a snapshot consumes nothing and describes each
// algorithm's own state; Reset empties it.
func TestAlgorithmsWindowAndReset(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			p := mustPolicy(t, "w=10/1h,20/2h@"+string(alg))
			awayFromBoundary(t, c, 2*3_600_000, 5*time.Second)
			key := uniqueKey(t)
			for range 3 {
				if d, err := lim.Allow(ctx, key, p, 1); err != nil || !d.Allowed {
					t.Fatalf("%+v %v", d, err)
				}
			}
			w, err := lim.Window(ctx, key, p)
			if err != nil {
				t.Fatal(err)
			}
			w2, err := lim.Window(ctx, key, p)
			if err != nil {
				t.Fatal(err)
			}
			if w.Algorithm != alg || w.Count != 3 || w.Limit != 20 || w.WindowMs != 7_200_000 || w2.Count != 3 {
				t.Fatalf("window %+v, then %+v", w, w2)
			}
			for i, r := range w.Rules {
				if r.Count != 3 || r.Remaining != r.Limit-3 || r.ResetMs <= 0 || r.Violated || r.RetryMs != 0 {
					t.Fatalf("rule %d: %+v", i, r)
				}
				switch alg {
				case limiter.Log:
					if len(w.Entries) != 3 || r.OldestMs != w.Entries[0].Ms {
						t.Fatalf("entries %+v, rule %+v", w.Entries, r)
					}
				case limiter.Fixed:
					if s, _ := r.State.(*limiter.FixedState); s == nil || s.Count != 3 || s.WindowStartMs != align(w.NowMs, r.WindowMs) {
						t.Fatalf("rule %d: %+v", i, r.State)
					}
				case limiter.Counter:
					if s, _ := r.State.(*limiter.CounterState); s == nil || s.Current != 3 || s.Previous != 0 || s.Estimate != 3 || s.WindowStartMs != align(w.NowMs, r.WindowMs) {
						t.Fatalf("rule %d: %+v", i, s)
					}
				case limiter.GCRA:
					// Three emission intervals ahead of the first request.
					if s, _ := r.State.(*limiter.GCRAState); s == nil || s.TATMs <= float64(w.NowMs) || s.TATMs > float64(w.NowMs)+3*float64(r.WindowMs)/float64(r.Limit) {
						t.Fatalf("rule %d: %+v at %d", i, s, w.NowMs)
					}
				case limiter.Bucket:
					if s, _ := r.State.(*limiter.BucketState); s == nil || s.Tokens < float64(r.Limit-3) || s.Tokens >= float64(r.Limit-2) || s.LastRefillMs > w.NowMs {
						t.Fatalf("rule %d: %+v at %d", i, s, w.NowMs)
					}
				}
				if alg != limiter.Log && len(w.Entries) != 0 {
					t.Fatalf("entries for %s: %+v", alg, w.Entries)
				}
			}
			ttl := c.PTTL(ctx, stateKey(key, p)).Val()
			if ttl <= 0 || ttl > 2*2*time.Hour {
				t.Fatalf("PTTL %v", ttl)
			}
			if err := lim.Reset(ctx, key, p); err != nil {
				t.Fatal(err)
			}
			if n := c.Exists(ctx, stateKey(key, p)).Val(); n != 0 {
				t.Fatal("Reset left the state")
			}
			w, err = lim.Window(ctx, key, p)
			if err != nil || w.Count != 0 || w.Rules[0].Remaining != 10 || w.Rules[0].ResetMs != 0 {
				t.Fatalf("after Reset: %+v %v", w, err)
			}
		})
	}
}

// TestAlgorithmsRealWait runs the whole cycle on the live clock for every
// algorithm: fill, deny, sleep RetryAfterMs, allowed.
func TestAlgorithmsRealWait(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, alg := range algorithms {
		p := mustPolicy(t, "short=2/1s@"+string(alg))
		key := uniqueKey(t)
		wg.Go(func() {
			for {
				d, err := lim.Allow(ctx, key, p, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					continue
				}
				if d.RetryAfterMs <= 0 || d.RetryAfterMs > 2000 {
					t.Errorf("%s: %+v", alg, d)
					return
				}
				time.Sleep(time.Duration(d.RetryAfterMs) * time.Millisecond)
				if d2, err := lim.Allow(ctx, key, p, 1); err != nil || !d2.Allowed || d2.NowMs < d.NowMs+d.RetryAfterMs {
					t.Errorf("%s: after waiting %d ms: %+v %v", alg, d.RetryAfterMs, d2, err)
				}
				return
			}
		})
	}
	wg.Wait()
}

// TestClusterAlgorithms: the same exactness on a real three-node cluster, for
// every algorithm: concurrent checks allow what the definition allows, and a
// seeded state's retry is exact.
func TestClusterAlgorithms(t *testing.T) {
	cl := redistest.StartCluster(t)
	client := cl.Client()
	lim := limiter.New(client)
	ctx := context.Background()
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			p := mustPolicy(t, "burst=37/1h@"+string(alg))
			for run := range 3 {
				key := fmt.Sprintf("%s-%d", uniqueKey(t), run)
				ds := burst(t, 500, func(int) (limiter.Decision, error) { return lim.Allow(ctx, key, p, 1) })
				if got, want := countAllowed(ds), expectedAllowed(p, ds); got != want {
					t.Fatalf("run %d: allowed %d, want %d", run, got, want)
				}
			}
			if alg == limiter.Log {
				return
			}
			// A state that first fits 2 s from now (time enough for the
			// check to arrive on a loaded machine): the retry says so.
			p2 := mustPolicy(t, "exact=3/1m@"+string(alg))
			awayFromBoundary(t, client, 60_000, 5*time.Second)
			t0 := redisNow(t, client)
			var m ruleModel
			switch alg {
			case limiter.GCRA:
				m = &gcraModel{l: 3, w: 60_000, tat: (t0 + 2000 + 60_000 - 20_000) * 3}
			case limiter.Bucket:
				m = &bucketModel{l: 3, w: 60_000, units: 60_000 - 6000, last: t0}
			default: // full at t0
				m = emptyModel(alg, 3, 60_000)
				m.take(t0, 3)
			}
			key := uniqueKey(t)
			seedModel(t, client, key, p2, policyModel{m})
			d, err := lim.Allow(ctx, key, p2, 1)
			if err != nil || d.Allowed {
				t.Fatalf("%+v %v", d, err)
			}
			if want := (policyModel{m}).firstFit(d.NowMs, 1) - d.NowMs; d.RetryAfterMs != want {
				t.Fatalf("RetryAfterMs = %d, want %d", d.RetryAfterMs, want)
			}
		})
	}
}

// TestAlgorithmsLimitChanged: state written under one limit is read sensibly
// under another of the same window (a config reload): counts stay counts, a
// bucket holds at most its new capacity, and a GCRA TAT kept in fifths of a
// ms is re-expressed in sevenths, rounded up (never earlier than it was).
func TestAlgorithmsLimitChanged(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	ctx := context.Background()
	awayFromBoundary(t, c, 60_000, 5*time.Second)
	t0 := redisNow(t, c)
	start := align(t0, 60_000)
	for _, tc := range []struct {
		alg    limiter.Algorithm
		stored string
		// model is the state as the new limit of 7 must read it.
		model ruleModel
	}{
		{limiter.Fixed, fmt.Sprintf("%d:9", start), &fixedModel{l: 7, w: 60_000, start: start, count: 9}},
		{limiter.Counter, fmt.Sprintf("%d:0:9", start), &counterModel{l: 7, w: 60_000, start: start, curr: 9}},
		// 12 tokens of an old limit of 12: the bucket is full at 7.
		{limiter.Bucket, fmt.Sprintf("%d:%d", 12*60_000, t0), &bucketModel{l: 7, w: 60_000, units: 7 * 60_000, last: t0}},
		// TAT = t0 + 55,000 + 1/5 ms; in sevenths 1/5 = 1.4/7, so 2/7.
		// Two requests add 120,000/7 = 17,142 + 6/7 ms: 2/7 + 6/7 leaves a
		// part of a ms over (first fit at t0 + 12,144), where 1/7 would not
		// (t0 + 12,143).
		{limiter.GCRA, fmt.Sprintf("%d:1:5", t0+55_000), &gcraModel{l: 7, w: 60_000, tat: (t0+55_000)*7 + 2}},
	} {
		t.Run(string(tc.alg), func(t *testing.T) {
			p := mustPolicy(t, "changed=7/1m@"+string(tc.alg))
			key := uniqueKey(t)
			if err := c.HSet(ctx, stateKey(key, p), "60000", tc.stored).Err(); err != nil {
				t.Fatal(err)
			}
			w, err := lim.Window(ctx, key, p)
			if err != nil {
				t.Fatal(err)
			}
			if want := remaining(tc.model, w.NowMs); int64(w.Rules[0].Remaining) != want {
				t.Fatalf("Remaining %d, want %d", w.Rules[0].Remaining, want)
			}
			cost := int64(1)
			if tc.alg == limiter.GCRA {
				cost = 2
			}
			d, err := lim.Allow(ctx, key, p, int(cost))
			if err != nil {
				t.Fatal(err)
			}
			first := (policyModel{tc.model}).firstFit(d.NowMs, cost)
			if d.Allowed != (first == d.NowMs) || d.RetryAfterMs != first-d.NowMs {
				t.Fatalf("allowed=%v retry=%d; the model first allows at now+%d", d.Allowed, d.RetryAfterMs, first-d.NowMs)
			}
		})
	}
}
