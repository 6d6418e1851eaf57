package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestQuotaOnACluster: a quota's counters share the client key's hash tag
// with its window and lock, so the one script run that decides them all is
// valid on a Redis Cluster, for a single check, for many windows read in one
// pipeline and for a reset; concurrent checks admit exactly the quota.
func TestQuotaOnACluster(t *testing.T) {
	client := redistest.StartCluster(t).Client()
	ctx := context.Background()
	shift, _ := shiftTo(t, client, time.Date(2025, 6, 18, 12, 0, 0, 0, time.UTC), 0)
	lim := limiter.New(client, limiter.WithCalendar(nil, shift))
	for _, alg := range algorithms {
		p := mustPolicy(t, "cq=1000/1m,37/week@"+string(alg)+"+lock=1m+tz=Europe/Berlin")
		key := uniqueKey(t) + "-" + string(alg)
		ds := burst(t, 200, func(int) (limiter.Decision, error) { return lim.Allow(ctx, key, p, 1) })
		if n := countAllowed(ds); n != 37 {
			t.Fatalf("%s: %d of 200 allowed on a quota of 37", alg, n)
		}
		ws, errs := lim.Windows(ctx, []limiter.WindowOf{{Key: key, Policy: p}, {Key: key + "-other", Policy: p}})
		if errs[0] != nil || errs[1] != nil || ws[0].Rules[1].Count != 37 || ws[1].Rules[1].Count != 0 {
			t.Fatalf("%s: windows %+v, %v", alg, ws, errs)
		}
		if err := lim.Reset(ctx, key, p); err != nil {
			t.Fatal(err)
		}
		if d := allow(t, lim, key, p, 1); !d.Allowed || quotaRule(t, d, limiter.Week).Count != 1 {
			t.Fatalf("%s: after a reset: %+v", alg, d)
		}
	}
}
