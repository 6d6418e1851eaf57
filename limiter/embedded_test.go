package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/embedredis"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestEmbeddedMatchesRealRedis runs one sequence of checks, snapshots and
// resets on the embedded Redis and on a real redis-server: the demo must
// behave as production does.
func TestEmbeddedMatchesRealRedis(t *testing.T) {
	emb, err := embedredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	real := redistest.URL(t)

	run := func(url string) []string {
		lim := limiter.New(newClient(t, url))
		ctx := context.Background()
		key := uniqueKey(t)
		multi := mustPolicy(t, "login=3/5s,5/1m")
		demo := mustPolicy(t, "demo=5/10s")
		var out []string
		check := func(p limiter.Policy, cost int) {
			d, err := lim.Allow(ctx, key, p, cost)
			if err != nil {
				t.Fatal(err)
			}
			s := fmt.Sprintf("%s cost=%d allowed=%v binding=%d retry>0=%v id=%v", p.Name, cost, d.Allowed, d.Binding, d.RetryAfterMs > 0, d.ID != "")
			for _, r := range d.Rules {
				s += fmt.Sprintf(" [%d/%d rem=%d violated=%v oldest=%v]", r.Count, r.Limit, r.Remaining, r.Violated, r.OldestMs >= 0)
			}
			out = append(out, s)
		}
		window := func(p limiter.Policy) {
			w, err := lim.Window(ctx, key, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("window %s count=%d entries=%d limit=%d windowMs=%d truncated=%v", p.Name, w.Count, len(w.Entries), w.Limit, w.WindowMs, w.Truncated))
		}
		for range 7 {
			check(demo, 1)
		}
		window(demo)
		check(multi, 2)
		check(multi, 2)
		check(multi, 1)
		check(multi, 1)
		check(multi, 3)
		window(multi)
		if err := lim.Reset(ctx, key, demo); err != nil {
			t.Fatal(err)
		}
		window(demo)
		check(demo, 5)
		check(demo, 1)
		return out
	}
	embedded, onReal := run(emb.URL()), run(real)
	if !slices.Equal(embedded, onReal) {
		for i := range onReal {
			if embedded[i] != onReal[i] {
				t.Errorf("step %d:\nembedded %s\nreal     %s", i, embedded[i], onReal[i])
			}
		}
	}
}

// TestEmbeddedRunsEveryAlgorithm: `go run .` decides on the embedded Redis, so
// every algorithm's script must run there as on a real redis-server. One
// sequence of checks, snapshots and resets on fresh keys gives the same
// answers on both, and on the embedded server the random seeded states of
// TestAlgorithmsMatchTheirDefinition match the definition, exact retry times
// included.
func TestEmbeddedRunsEveryAlgorithm(t *testing.T) {
	emb, err := embedredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	real := redistest.URL(t)

	run := func(t *testing.T, url, alg string) []string {
		c := newClient(t, url)
		lim := limiter.New(c)
		ctx := context.Background()
		// Hour windows: far from an edge of Redis time, both runs see one
		// window whatever the millisecond they start at.
		awayFromBoundary(t, c, 2*3_600_000, 5*time.Second)
		key := uniqueKey(t)
		multi := mustPolicy(t, "login=3/1h,5/2h@"+alg)
		single := mustPolicy(t, "one=4/1h@"+alg)
		var out []string
		check := func(p limiter.Policy, cost int) {
			d, err := lim.Allow(ctx, key, p, cost)
			if err != nil {
				t.Fatal(err)
			}
			s := fmt.Sprintf("%s cost=%d allowed=%v binding=%d retry>0=%v id=%v", p.Name, cost, d.Allowed, d.Binding, d.RetryAfterMs > 0, d.ID != "")
			for _, r := range d.Rules {
				s += fmt.Sprintf(" [%d/%d rem=%d violated=%v reset>0=%v]", r.Count, r.Limit, r.Remaining, r.Violated, r.ResetMs > 0)
			}
			out = append(out, s)
		}
		window := func(p limiter.Policy) {
			w, err := lim.Window(ctx, key, p)
			if err != nil {
				t.Fatal(err)
			}
			s := fmt.Sprintf("window %s %s count=%d limit=%d windowMs=%d", p.Name, w.Algorithm, w.Count, w.Limit, w.WindowMs)
			for _, r := range w.Rules {
				s += fmt.Sprintf(" [%d rem=%d fixed=%v counter=%v gcra=%v bucket=%v]", r.Count, r.Remaining, r.Fixed != nil, r.Counter != nil, r.GCRA != nil, r.Bucket != nil)
			}
			out = append(out, s)
		}
		for range 6 {
			check(single, 1)
		}
		window(single)
		for _, cost := range []int{2, 2, 1, 1, 3} {
			check(multi, cost)
		}
		window(multi)
		if err := lim.Reset(ctx, key, single); err != nil {
			t.Fatal(err)
		}
		window(single)
		check(single, 4)
		check(single, 1)
		return out
	}
	for _, alg := range stateAlgorithms {
		t.Run(alg, func(t *testing.T) {
			embedded, onReal := run(t, emb.URL(), alg), run(t, real, alg)
			if !slices.Equal(embedded, onReal) {
				for i := range onReal {
					if embedded[i] != onReal[i] {
						t.Errorf("step %d:\nembedded %s\nreal     %s", i, embedded[i], onReal[i])
					}
				}
			}
			c := newClient(t, emb.URL())
			matchDefinition(t, c, limiter.New(c), alg, 60)
		})
	}
}
