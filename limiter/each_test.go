package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// labPolicies is one rule under every algorithm, all named lab.
func labPolicies(t testing.TB, rule string) []limiter.Policy {
	t.Helper()
	ps := make([]limiter.Policy, len(algorithms))
	for i, a := range algorithms {
		ps[i] = mustPolicy(t, "lab="+rule+"@"+string(a))
	}
	return ps
}

// TestAllowEachDecidesAllInOneCall checks that one call decides under all
// five algorithms, in order, in one round trip (one MULTI/EXEC: the Redis
// command count grows by the five scripts plus MULTI and EXEC), that each
// algorithm's state lands in its own key and expires with the window.
func TestAllowEachDecidesAllInOneCall(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"real": redistest.RealURL, "embedded": redistest.EmbeddedURL} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, url(t))
			lim := limiter.New(c)
			ctx := context.Background()
			key := uniqueKey(t)
			ps := labPolicies(t, "3/10s")
			for i := range 4 {
				ds, err := lim.AllowEach(ctx, key, ps, 1)
				if err != nil {
					t.Fatal(err)
				}
				if len(ds) != len(algorithms) {
					t.Fatalf("%d decisions, want %d", len(ds), len(algorithms))
				}
				for j, d := range ds {
					if d.Algorithm != algorithms[j] {
						t.Errorf("decision %d is %s, want %s", j, d.Algorithm, algorithms[j])
					}
					if want := i < 3; d.Allowed != want {
						t.Errorf("request %d under %s: allowed %v, want %v", i+1, d.Algorithm, d.Allowed, want)
					}
					if j > 0 && d.NowMs < ds[j-1].NowMs {
						t.Errorf("%s decided at %d, before %s at %d: not run in order", d.Algorithm, d.NowMs, ds[j-1].Algorithm, ds[j-1].NowMs)
					}
				}
			}
			for _, a := range algorithms {
				k := redisdata.StateKey(key, "lab", string(a))
				ttl, err := c.PTTL(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				limit := 10 * time.Second
				if a == limiter.Counter { // keeps the previous window's count
					limit *= 2
				}
				if ttl <= 0 || ttl > limit {
					t.Errorf("%s: key %s expires in %v, want within %v", a, k, ttl, limit)
				}
			}
		})
	}
	t.Run("cluster", func(t *testing.T) {
		// One MULTI/EXEC on a cluster needs every key in one slot: the
		// client key's hash tag puts them there.
		c := redistest.StartCluster(t).Client()
		lim := limiter.New(c)
		ps := labPolicies(t, "2/10s")
		for i := range 3 {
			ds, err := lim.AllowEach(context.Background(), "lab:cluster", ps, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if d.Allowed != (i < 2) {
					t.Errorf("request %d under %s: allowed %v", i+1, d.Algorithm, d.Allowed)
				}
			}
		}
	})
	t.Run("one round trip", func(t *testing.T) {
		c := newClient(t, redistest.RealURL(t))
		lim := limiter.New(c)
		ctx := context.Background()
		key := uniqueKey(t)
		ps := labPolicies(t, "3/10s")
		if _, err := lim.AllowEach(ctx, key, ps, 1); err != nil { // loads the scripts
			t.Fatal(err)
		}
		before := commandCalls(t, c)
		if _, err := lim.AllowEach(ctx, key, ps, 1); err != nil {
			t.Fatal(err)
		}
		after := commandCalls(t, c)
		if after["multi"]-before["multi"] != 1 || after["exec"]-before["exec"] != 1 || after["evalsha"]-before["evalsha"] != len(ps) {
			t.Errorf("one AllowEach ran multi %d, exec %d, evalsha %d; want 1, 1, %d",
				after["multi"]-before["multi"], after["exec"]-before["exec"], after["evalsha"]-before["evalsha"], len(ps))
		}
		// A Redis that lost its scripts (a restart) fails each EVALSHA inside
		// the transaction without running it: they are sent again in full,
		// and each request still counts once.
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		ds, err := lim.AllowEach(ctx, key, ps, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if !d.Allowed || d.Bound().Remaining != 0 {
				t.Errorf("the third of 3 after SCRIPT FLUSH under %s: allowed %v, remaining %d; want allowed, 0", d.Algorithm, d.Allowed, d.Bound().Remaining)
			}
		}
		if n := c.ZCard(ctx, redisdata.LogKey(key, "lab")).Val(); n != 3 {
			t.Errorf("the log holds %d entries after three requests, want 3", n)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		lim := limiter.New(newClient(t, redistest.EmbeddedURL(t)))
		ps := labPolicies(t, "3/10s")
		if _, err := lim.AllowEach(context.Background(), "k", ps, 4); err != limiter.ErrInvalidCost {
			t.Errorf("cost 4 of 3: %v, want ErrInvalidCost", err)
		}
		if _, err := lim.AllowEach(context.Background(), "k", []limiter.Policy{ps[1], ps[1]}, 1); err != limiter.ErrSharedKeys {
			t.Errorf("the same policy twice: %v, want ErrSharedKeys", err)
		}
	})
}

// commandCalls reads INFO commandstats: calls per command.
func commandCalls(t testing.TB, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for line := range strings.Lines(info) {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		cmd, rest, _ := strings.Cut(name, ":")
		var calls int
		if _, err := fmt.Sscanf(rest, "calls=%d", &calls); ok && err == nil {
			out[cmd] = calls
		}
	}
	return out
}

// TestAllowEachBoundary sends limit requests just before a fixed-window edge
// on Redis's clock and limit just after it: fixed lets 2 × limit through
// within less than one window, while the log never allows more than limit in
// any window of its length.
func TestAllowEachBoundary(t *testing.T) {
	c := newClient(t, redistest.RealURL(t))
	lim := limiter.New(c)
	ctx := context.Background()
	const limit, windowMs = 5, int64(2000)
	ps := labPolicies(t, fmt.Sprintf("%d/%ds", limit, windowMs/1000))
	for attempt := range 5 {
		key := uniqueKey(t)
		now := redisNow(t, c)
		edge := (now/windowMs + 1) * windowMs
		if edge-now < 600 { // too close: the next edge
			edge += windowMs
		}
		time.Sleep(time.Duration(edge-400-now) * time.Millisecond)
		var before, after [][]limiter.Decision
		for range limit {
			ds, err := lim.AllowEach(ctx, key, ps, 1)
			if err != nil {
				t.Fatal(err)
			}
			before = append(before, ds)
		}
		if before[limit-1][1].NowMs >= edge {
			t.Logf("attempt %d: the first burst crossed the edge (machine busy); again", attempt)
			continue
		}
		time.Sleep(time.Duration(edge-redisNow(t, c)+1) * time.Millisecond)
		for redisNow(t, c) < edge {
			time.Sleep(time.Millisecond)
		}
		for range limit {
			ds, err := lim.AllowEach(ctx, key, ps, 1)
			if err != nil {
				t.Fatal(err)
			}
			after = append(after, ds)
		}
		all := append(before, after...)
		if span := all[len(all)-1][0].NowMs - all[0][0].NowMs; span >= windowMs {
			t.Logf("attempt %d: the bursts spanned %d ms, not within one window; again", attempt, span)
			continue
		}
		allowed := func(alg int) []int64 {
			var ms []int64
			for _, ds := range all {
				if ds[alg].Allowed {
					ms = append(ms, ds[alg].NowMs)
				}
			}
			return ms
		}
		logIdx, fixedIdx := slices.Index(algorithms, limiter.Log), slices.Index(algorithms, limiter.Fixed)
		if got := maxInWindow(allowed(logIdx), windowMs); got != limit {
			t.Errorf("log allowed %d within one window, want %d", got, limit)
		}
		if got := maxInWindow(allowed(fixedIdx), windowMs); got != 2*limit {
			t.Errorf("fixed allowed %d within one window, want %d (both bursts)", got, 2*limit)
		}
		return
	}
	t.Fatal("no attempt managed to straddle an edge")
}

// maxInWindow is the most of ms (ascending) inside any (t-window, t].
func maxInWindow(ms []int64, window int64) int {
	best, lo := 0, 0
	for hi := range ms {
		for ms[lo] <= ms[hi]-window {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}
