package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestShadowRecordsAsEnforced, for every algorithm: a +shadow policy decides
// and records exactly what the same policy enforced does — its denials are
// would-denies that record nothing and that the caller lets through — and its
// cached would-denies are marked the same way.
func TestShadowRecordsAsEnforced(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := cachedLimiter(t, c)
	costs := []int{1, 2, 1, 3, 1, 1, 2}
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			enforced := mustPolicy(t, "enforced=4/1m,5/1h@"+string(alg))
			shadow := mustPolicy(t, "shadowed=4/1m,5/1h@"+string(alg)+"+shadow")
			if !shadow.Shadow || enforced.Shadow {
				t.Fatalf("parsed %+v and %+v", enforced, shadow)
			}
			key := uniqueKey(t)
			if alg == limiter.Fixed || alg == limiter.Counter {
				awayFromBoundary(t, c, 60_000, 10*time.Second) // all in one aligned minute
			}
			allowedCost := 0
			// How far apart the two policies' checks ran, at most: each
			// retry is measured from its own check, so on a slow machine
			// the two differ by up to that much.
			var gap int64
			for i, cost := range costs {
				e := allow(t, lim, key, enforced, cost)
				s := allow(t, lim, key, shadow, cost)
				gap = max(gap, s.NowMs-e.NowMs, e.NowMs-s.NowMs)
				if e.Shadow || !s.Shadow {
					t.Fatalf("#%d: Shadow enforced %v, shadowed %v", i, e.Shadow, s.Shadow)
				}
				if e.Allowed != s.Allowed || e.Cached != s.Cached || e.Binding != s.Binding {
					t.Fatalf("#%d cost %d: enforced %+v, shadowed %+v: want the same decision", i, cost, e, s)
				}
				for r := range e.Rules {
					if e.Rules[r].Count != s.Rules[r].Count || e.Rules[r].Violated != s.Rules[r].Violated {
						t.Fatalf("#%d rule %d: enforced %+v, shadowed %+v", i, r, e.Rules[r], s.Rules[r])
					}
				}
				if d := e.RetryAfterMs - s.RetryAfterMs; d < -50-gap || d > 1000+gap {
					t.Errorf("#%d: retries enforced %d, shadowed %d ms (checks up to %d ms apart)", i, e.RetryAfterMs, s.RetryAfterMs, gap)
				}
				if e.Denied() != !e.Allowed || e.WouldDeny() || s.Denied() || s.WouldDeny() != !s.Allowed {
					t.Errorf("#%d: enforced Denied %v WouldDeny %v, shadowed Denied %v WouldDeny %v (allowed %v)",
						i, e.Denied(), e.WouldDeny(), s.Denied(), s.WouldDeny(), e.Allowed)
				}
				if s.WouldDeny() && s.RetryAfterMs <= 0 {
					t.Errorf("#%d: a would-deny without its retry: %+v", i, s)
				}
				if e.Allowed {
					allowedCost += cost
				}
			}
			if allowedCost != 4 {
				t.Fatalf("the sequence allowed a cost of %d; it should fill the 4/1m rule exactly", allowedCost)
			}
			// Both windows hold the same; for the log, exactly the allowed entries.
			we, err := lim.Window(context.Background(), key, enforced)
			if err != nil {
				t.Fatal(err)
			}
			ws, err := lim.Window(context.Background(), key, shadow)
			if err != nil {
				t.Fatal(err)
			}
			for r := range we.Rules {
				if we.Rules[r].Count != ws.Rules[r].Count || we.Rules[r].Count != allowedCost {
					t.Errorf("rule %d: enforced counts %d, shadowed %d, want %d", r, we.Rules[r].Count, ws.Rules[r].Count, allowedCost)
				}
			}
			if alg == limiter.Log && (len(members(t, c, key, enforced)) != allowedCost || len(members(t, c, key, shadow)) != allowedCost) {
				t.Errorf("log entries enforced %d, shadowed %d, want %d", len(members(t, c, key, enforced)), len(members(t, c, key, shadow)), allowedCost)
			}
			// The last checks were denials of a full window: the next are cached.
			e, s := allow(t, lim, key, enforced, 1), allow(t, lim, key, shadow, 1)
			if !e.Cached || !s.Cached || !s.WouldDeny() || s.Denied() || !e.Denied() {
				t.Errorf("cached: enforced %+v, shadowed %+v", e, s)
			}
		})
	}
}
