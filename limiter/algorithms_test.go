package limiter_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestAlgorithmsMatchTheirDefinition seeds random states (one or two rules,
// any cost) relative to Redis's clock and checks each decision against the
// model: allowed exactly when the definition allows at the decision's NowMs;
// RetryAfterMs the first ms at which the same request fits (so one ms earlier
// it does not); Remaining, ResetMs and the binding rule as defined; a denial
// changes nothing; an allowed request leaves the state the definition says
// (read back through Window).
func TestAlgorithmsMatchTheirDefinition(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	for _, alg := range stateAlgorithms {
		t.Run(string(alg), func(t *testing.T) { matchDefinition(t, c, lim, alg, 150) })
	}
}

// matchDefinition runs n random seeded cases of alg through lim.
func matchDefinition(t *testing.T, c redis.UniversalClient, lim *limiter.Limiter, alg limiter.Algorithm, n int) {
	ctx := context.Background()
	windows := []int64{1000, 2000, 3000, 10_000, 60_000}
	rng := rand.New(rand.NewPCG(42, uint64(len(alg))))
	seen := map[string]int{}
	for i := range n {
		var rules []string
		ws := slices.Clone(windows)
		rng.Shuffle(len(ws), func(a, b int) { ws[a], ws[b] = ws[b], ws[a] })
		for j := range 1 + rng.IntN(2) {
			rules = append(rules, fmt.Sprintf("%d/%ds", 1+rng.IntN(10), ws[j]/1000))
		}
		p := mustPolicy(t, fmt.Sprintf("m%d=%s@%s", i, strings.Join(rules, ","), alg))
		cost := int64(1 + rng.IntN(p.SmallestLimit()))
		key := uniqueKey(t)
		t0 := redisNow(t, c)
		pm := make(policyModel, len(p.Rules))
		for j, r := range p.Rules {
			pm[j] = randomModel(alg, int64(r.Limit), r.WindowMs(), t0, rng)
		}
		seedModel(t, c, key, p, pm)
		before := stateOf(t, c, key, p)

		d, err := lim.Allow(ctx, key, p, int(cost))
		if err != nil {
			t.Fatal(err)
		}
		now := d.NowMs
		desc := fmt.Sprintf("case %d: %s cost %d, seeded %v at t0, decided at t0+%d", i, p, cost, before, now-t0)
		first := pm.firstFit(now, cost)
		if d.Allowed != (first == now) {
			t.Fatalf("%s: allowed=%v, but the definition first allows it at now+%d", desc, d.Allowed, first-now)
		}
		if d.RetryAfterMs != first-now {
			t.Fatalf("%s: RetryAfterMs = %d, want %d (first fit)", desc, d.RetryAfterMs, first-now)
		}
		if !d.Allowed {
			seen["denied"]++
			if after := stateOf(t, c, key, p); !maps.Equal(before, after) {
				t.Fatalf("%s: a denial changed the state to %v", desc, after)
			}
			worst := int64(-1)
			for j, r := range pm {
				s := d.Rules[j]
				violated := !r.fits(now, cost)
				if s.Violated != violated {
					t.Fatalf("%s: rule %d violated=%v, want %v", desc, j, s.Violated, violated)
				}
				if violated {
					want := policyModel{r}.firstFit(now, cost) - now
					if s.RetryMs != want {
						t.Fatalf("%s: rule %d RetryMs = %d, want %d", desc, j, s.RetryMs, want)
					}
					worst = max(worst, want)
				}
			}
			if b := d.Bound(); !b.Violated || b.RetryMs != worst {
				t.Fatalf("%s: binding rule %d %+v, want the violated one with the longest retry %d", desc, d.Binding, b, worst)
			}
		} else {
			seen["allowed"]++
			for _, r := range pm {
				r.take(now, cost)
			}
		}
		for j, r := range pm {
			s := d.Rules[j]
			if want := remaining(r, now); int64(s.Remaining) != want {
				t.Fatalf("%s: rule %d Remaining = %d, want %d", desc, j, s.Remaining, want)
			}
			if want := resetAfter(r, now); s.ResetMs != want {
				t.Fatalf("%s: rule %d ResetMs = %d, want %d", desc, j, s.ResetMs, want)
			}
			if s.OldestMs != -1 {
				t.Fatalf("%s: rule %d OldestMs = %d, want -1", desc, j, s.OldestMs)
			}
		}
		w, err := lim.Window(ctx, key, p)
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range pm {
			if want := remaining(r, w.NowMs); int64(w.Rules[j].Remaining) != want {
				t.Fatalf("%s: after it, Window rule %d Remaining = %d, want %d", desc, j, w.Rules[j].Remaining, want)
			}
		}
		if d.Allowed {
			if ttl := c.PTTL(ctx, stateKey(key, p)).Val(); ttl <= 0 {
				// Gone already is right only once every rule's reset has
				// passed (a window's last ms, on a slow machine).
				longest := int64(0)
				for _, r := range d.Rules {
					longest = max(longest, r.ResetMs)
				}
				if elapsed := redisNow(t, c) - d.NowMs; elapsed < longest {
					t.Fatalf("%s: the state has no TTL (%v) %d ms after the decision, %d ms before its reset", desc, ttl, elapsed, longest-elapsed)
				}
			}
		}
	}
	if seen["allowed"] < n/8 || seen["denied"] < n/8 {
		t.Fatalf("the random states tried too little of one side: %v", seen)
	}
}

// TestAlgorithmsExactUnderConcurrency: 500 concurrent checks on a fresh key,
// through two limiters (one batching, one not, as two app instances), allow
// exactly what the definition allows: the limit for every algorithm from
// empty. Windows are an hour, so the burst fits in one fixed window unless it
// straddles a boundary of Redis time; then the expectation comes from the
// model at the decisions' NowMs (e.g. fixed legitimately allows more).
func TestAlgorithmsExactUnderConcurrency(t *testing.T) {
	url := redistest.URL(t)
	lims := []*limiter.Limiter{
		limiter.New(newClient(t, url)),
		limiter.New(newClient(t, url), limiter.WithoutBatching()),
	}
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			p := mustPolicy(t, "burst=37/1h@"+string(alg))
			for run := range 5 {
				key := fmt.Sprintf("%s-%d", uniqueKey(t), run)
				ds := burst(t, 500, func(i int) (limiter.Decision, error) {
					return lims[i%2].Allow(context.Background(), key, p, 1)
				})
				allowed, want := countAllowed(ds), expectedAllowed(p, ds)
				if allowed != want {
					t.Fatalf("run %d: allowed %d of 500, want %d", run, allowed, want)
				}
				if want != 37 {
					t.Logf("run %d straddled a window boundary: %d allowed, as the definition says", run, want)
				}
			}
		})
	}
}

// burst releases n concurrent checks at once and returns their decisions.
func burst(t *testing.T, n int, check func(i int) (limiter.Decision, error)) []limiter.Decision {
	t.Helper()
	ds := make([]limiter.Decision, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ds[i], errs[i] = check(i)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ds
}

func countAllowed(ds []limiter.Decision) int {
	n := 0
	for _, d := range ds {
		if d.Allowed {
			n++
		}
	}
	return n
}

// expectedAllowed replays cost-1 decisions in NowMs order through the model
// of p from empty. Requests of the same ms are alike, so their order does not
// change how many pass. The log allows the limit within its window.
func expectedAllowed(p limiter.Policy, ds []limiter.Decision) int {
	if p.Algorithm == limiter.Log {
		return min(len(ds), p.Rules[0].Limit)
	}
	times := make([]int64, len(ds))
	for i, d := range ds {
		times[i] = d.NowMs
	}
	slices.Sort(times)
	pm, n := modelOf(p), 0
	for _, t := range times {
		if pm.fits(t, 1) {
			for _, r := range pm {
				r.take(t, 1)
			}
			n++
		}
	}
	return n
}

// TestAlgorithmsRetryIsTheFirstAllowedMs walks a ladder of keys whose states
// are seeded so that a request first fits at t0+k, k = -3, -2, …: the k-th
// key's check (at NowMs, a little after t0) must be allowed exactly when
// NowMs >= t0+k, and otherwise name RetryAfterMs = t0+k - NowMs. As k grows
// by 1 a check and the clock by at most a few ms, NowMs - (t0+k) falls through
// 0 and -1, so the ladder always meets the request that waited exactly long
// enough and the one that is one ms early. When round trips are slower than
// that (a loaded machine), the clock outruns the ladder: it then re-aims its
// next rung at the current ms, until a landing meets both.
//
// That needs round trips well under a millisecond: a real redis-server's. The
// embedded Redis on a loaded machine takes a few ms a check, so the clock
// outruns the ladder and the test would measure the machine, not the retry.
func TestAlgorithmsRetryIsTheFirstAllowedMs(t *testing.T) {
	c := newClient(t, redistest.RealURL(t))
	lim := limiter.New(c, limiter.WithoutBatching())
	ladders := []struct {
		policy string
		cost   int64
		// model is a rule whose request of cost first fits at at.
		model func(p limiter.Policy, at, t0 int64, k int) ruleModel
	}{
		// 1000/3 ms per request: the TAT carries a fraction of a ms.
		{"g=3/1s@gcra", 1, func(_ limiter.Policy, at, _ int64, k int) ruleModel {
			// fits from TAT + c×w/l − w on: TAT = at + w − c×w/l, in 1/l ms,
			// plus a part of a ms that the first whole ms rounds away.
			return &gcraModel{l: 3, w: 1000, tat: (at+1000)*3 - 1000 - frac(k)}
		}},
		{"g2=3/1s@gcra", 2, func(_ limiter.Policy, at, _ int64, k int) ruleModel {
			return &gcraModel{l: 3, w: 1000, tat: (at+1000)*3 - 2000 - frac(k)}
		}},
		// A token every 20 s; the bucket last filled at t0 lacks (at−t0)
		// ms of refill, less a part of one.
		{"b=3/1m@bucket", 1, func(_ limiter.Policy, at, t0 int64, k int) ruleModel {
			return &bucketModel{l: 3, w: 60_000, units: 60_000 - 3*(at-t0) + frac(k), last: t0}
		}},
		{"b2=3/1m@bucket", 3, func(_ limiter.Policy, at, t0 int64, k int) ruleModel {
			return &bucketModel{l: 3, w: 60_000, units: 180_000 - 3*(at-t0) + frac(k), last: t0}
		}},
		// A limit of 10^7 and a previous count of one per ms of the hour
		// window: the estimate falls by one every ms, so the room needed
		// sets the ms it appears.
		{"c=10000000/1h@counter", 1, func(p limiter.Policy, at, t0 int64, _ int) ruleModel {
			const l, w = 10_000_000, 3_600_000
			start := align(t0, w)
			room := start + w - at // prev × (w − e) ≤ room × w from e = w − room on
			return &counterModel{l: l, w: w, start: start, prev: w, curr: l - 1 - room}
		}},
	}
	for _, lad := range ladders {
		t.Run(lad.policy, func(t *testing.T) {
			p := mustPolicy(t, lad.policy)
			if p.Algorithm == limiter.Counter {
				awayFromBoundary(t, c, p.Rules[0].WindowMs(), 10*time.Second)
			}
			t0 := redisNow(t, c)
			var atZero, atMinusOne bool
			var keys []string
			jumps := 0
			for k, rungs := -3, 0; k < 5000 && rungs < 20_000 && !(atZero && atMinusOne); k, rungs = k+1, rungs+1 {
				at := t0 + int64(k)
				if len(keys) == 0 {
					// Seed the next rungs in one round trip, so each rung
					// costs one: the clock must not outrun k.
					var pms []policyModel
					for j := k; j < k+32; j++ {
						m := lad.model(p, t0+int64(j), t0, j)
						if first := (policyModel{m}).firstFit(t0, lad.cost); first != max(t0+int64(j), t0) {
							t.Fatalf("k=%d: the seeded state first fits at t0%+d, not t0%+d", j, first-t0, j)
						}
						pms = append(pms, policyModel{m})
					}
					keys = seedMany(t, c, p, pms)
				}
				key := keys[0]
				keys = keys[1:]
				d, err := lim.Allow(context.Background(), key, p, int(lad.cost))
				if err != nil {
					t.Fatal(err)
				}
				late := d.NowMs - at
				switch {
				case late >= 0 && !d.Allowed:
					t.Fatalf("k=%d: denied %d ms after the first allowed ms (retry %d)", k, late, d.RetryAfterMs)
				case late < 0 && d.Allowed:
					t.Fatalf("k=%d: allowed %d ms before the first allowed ms", k, -late)
				case late < 0 && d.RetryAfterMs != -late:
					t.Fatalf("k=%d: RetryAfterMs = %d, want %d", k, d.RetryAfterMs, -late)
				case late == 0:
					atZero = true
				case late == -1:
					atMinusOne = true
				}
				switch {
				case late > 2:
					// The clock outran the ladder (slow round trips on a
					// loaded machine): aim the next rung at about now, one
					// ms apart from the last aim, so some landing meets 0
					// or -1.
					jumps++
					k += int(late) + 1 - jumps%3
					keys = nil
				case late < -1 && !(atZero && atMinusOne):
					// Below -1 with one of them unmet (a landing skipped
					// it): start a few ms above again, to fall through both.
					k += int(late) - 2
					keys = nil
				}
			}
			if jumps > 0 {
				t.Logf("the clock outran the ladder %d times", jumps)
			}
			if !atZero || !atMinusOne {
				t.Fatalf("the ladder never met NowMs = first allowed ms (%v) and one ms before (%v)", atZero, atMinusOne)
			}
		})
	}
}

// frac varies the part of a ms a ladder's state carries: 0, 1 or 2 thirds.
func frac(k int) int64 { return int64((k%3 + 3) % 3) }

// awayFromBoundary waits, if need be, until Redis's clock is at least margin
// before the end of the current aligned window of w ms.
func awayFromBoundary(t testing.TB, c redis.UniversalClient, w int64, margin time.Duration) {
	t.Helper()
	now := redisNow(t, c)
	if left := align(now, w) + w - now; left < margin.Milliseconds() {
		time.Sleep(time.Duration(left+5) * time.Millisecond)
	}
}

// TestFixedWindowEdge checks fixed windows at their edge: a full window
// denies until the next one starts, with RetryAfterMs exactly until then, and
// allows from its first ms. Fresh keys seeded full in the current 1 s window
// are checked one after another across the boundary, until both the last ms
// before it and its first ms have been seen — which needs round trips well
// under a millisecond: a real redis-server's, not the embedded one's on a
// loaded machine.
func TestFixedWindowEdge(t *testing.T) {
	c := newClient(t, redistest.RealURL(t))
	lim := limiter.New(c, limiter.WithoutBatching())
	p := mustPolicy(t, "f=2/1s@fixed")
	var atEdge, before bool
	for attempt := 0; attempt < 20 && !(atEdge && before); attempt++ {
		// Start about 30 ms before an edge.
		now := redisNow(t, c)
		if left := align(now, 1000) + 1000 - now; left > 30 {
			time.Sleep(time.Duration(left-30) * time.Millisecond)
		}
		start := align(redisNow(t, c), 1000)
		edge := start + 1000
		var keys []string
		for {
			if len(keys) == 0 {
				pms := make([]policyModel, 64)
				for i := range pms {
					pms[i] = policyModel{&fixedModel{l: 2, w: 1000, start: start, count: 2}}
				}
				keys = seedMany(t, c, p, pms)
			}
			key := keys[0]
			keys = keys[1:]
			d, err := lim.Allow(context.Background(), key, p, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Bound().State.(*limiter.FixedState); got == nil || got.WindowStartMs != align(d.NowMs, 1000) {
				t.Fatalf("at %d: window start %+v, want %d", d.NowMs, got, align(d.NowMs, 1000))
			}
			if d.NowMs < edge {
				if d.Allowed || d.RetryAfterMs != edge-d.NowMs {
					t.Fatalf("%d ms before the edge: allowed=%v retry=%d, want denied, retry %d", edge-d.NowMs, d.Allowed, d.RetryAfterMs, edge-d.NowMs)
				}
				before = before || d.NowMs == edge-1
				continue
			}
			if !d.Allowed || d.Bound().Count != 1 {
				t.Fatalf("%d ms after the edge: %+v", d.NowMs-edge, d)
			}
			atEdge = atEdge || d.NowMs == edge
			break
		}
	}
	if !atEdge || !before {
		t.Fatalf("never saw a check at the edge (%v) and one ms before it (%v)", atEdge, before)
	}
}
