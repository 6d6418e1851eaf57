package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

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
