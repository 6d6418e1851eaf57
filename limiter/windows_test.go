package limiter_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestWindowsReadsManyAsWindowDoes: Windows answers each window as Window
// does, every algorithm and several keys mixed, a bad key with its own error
// and the rest still read; on a real Redis in one pipeline (no more
// EVALSHA calls than windows, nothing sent one by one), after a SCRIPT FLUSH
// too; on a cluster, windows of keys on different nodes.
func TestWindowsReadsManyAsWindowDoes(t *testing.T) {
	ctx := context.Background()
	fill := func(t *testing.T, lim *limiter.Limiter) []limiter.WindowOf {
		t.Helper()
		var ws []limiter.WindowOf
		for i, p := range append(labPolicies(t, "3/1h"), mustPolicy(t, "two=2/1h,5/24h")) {
			for k := range 3 {
				key := fmt.Sprintf("%s-%d-%d", uniqueKey(t), i, k)
				for range k { // 0, 1 and 2 requests
					if _, err := lim.Allow(ctx, key, p, 1); err != nil {
						t.Fatal(err)
					}
				}
				ws = append(ws, limiter.WindowOf{Key: key, Policy: p})
			}
		}
		return append(ws, limiter.WindowOf{Key: "bad key", Policy: ws[0].Policy})
	}
	same := func(t *testing.T, lim *limiter.Limiter, ws []limiter.WindowOf) {
		t.Helper()
		got, errs := lim.Windows(ctx, ws)
		if len(got) != len(ws) || len(errs) != len(ws) {
			t.Fatalf("Windows answered %d windows and %d errors for %d", len(got), len(errs), len(ws))
		}
		for i, w := range ws {
			want, wantErr := lim.Window(ctx, w.Key, w.Policy)
			if (errs[i] == nil) != (wantErr == nil) {
				t.Fatalf("%s under %s: Windows err %v, Window err %v", w.Key, w.Policy.Name, errs[i], wantErr)
			}
			if wantErr != nil {
				continue
			}
			if got[i].NowMs > want.NowMs || want.NowMs-got[i].NowMs > 5000 {
				t.Fatalf("%s: read at %d, then Window at %d", w.Key, got[i].NowMs, want.NowMs)
			}
			got[i].NowMs, want.NowMs = 0, 0
			for j := range want.Rules { // what depends on the moment of reading
				got[i].Rules[j].ResetMs, want.Rules[j].ResetMs = 0, 0
				clearMoment(&got[i].Rules[j])
				clearMoment(&want.Rules[j])
			}
			if !reflect.DeepEqual(got[i], want) {
				t.Fatalf("%s under %s:\nWindows %+v\nWindow  %+v", w.Key, w.Policy.Name, got[i], want)
			}
		}
		if errs[len(ws)-1] == nil {
			t.Fatal("a bad key was read")
		}
	}

	t.Run("real", func(t *testing.T) {
		c := newClient(t, redistest.RealURL(t))
		lim := limiter.New(c)
		ws := fill(t, lim)
		same(t, lim, ws) // loads the scripts
		before := commandCalls(t, c)
		if _, errs := lim.Windows(ctx, ws); errs[0] != nil {
			t.Fatal(errs[0])
		}
		after := commandCalls(t, c)
		if n := after["evalsha"] - before["evalsha"]; n != len(ws)-1 {
			t.Errorf("one Windows ran EVALSHA %d times for %d windows", n, len(ws)-1)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		same(t, lim, ws)
	})
	t.Run("embedded", func(t *testing.T) {
		lim := limiter.New(newClient(t, redistest.EmbeddedURL(t)))
		same(t, lim, fill(t, lim))
	})
	t.Run("cluster", func(t *testing.T) {
		lim := limiter.New(redistest.StartCluster(t).Client())
		same(t, lim, fill(t, lim))
	})
}

// clearMoment zeroes what changes between two reads a few milliseconds apart
// however nothing happened: refills, weights, a TAT that never lags now.
func clearMoment(r *limiter.RuleState) {
	switch st := r.State.(type) {
	case *limiter.CounterState:
		c := *st
		c.Weight, c.Estimate = 0, 0
		r.State = &c
	case *limiter.GCRAState:
		r.State = &limiter.GCRAState{}
	case *limiter.BucketState:
		b := *st
		b.Tokens, b.LastRefillMs = 0, 0 // an empty bucket was last full now
		r.State = &b
	case *limiter.FixedState:
	default: // an algorithm this test does not know: its counts are compared, not its state
		r.State = nil
	}
}
