package live

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live/hub"
)

// fullWindows is a ReadWindows whose every window holds entries entries, and
// which counts what it reads.
type fullWindows struct {
	entries      int
	reads, total atomic.Int64
	perWindow    sync.Map // Window -> *atomic.Int64
}

func (f *fullWindows) read(_ context.Context, ws []limiter.WindowOf) ([]limiter.Window, []error) {
	out := make([]limiter.Window, len(ws))
	es := make([]limiter.Entry, f.entries)
	for i := range es {
		es[i] = limiter.Entry{ID: fmt.Sprint(i), Ms: int64(i)}
	}
	for i, w := range ws {
		out[i] = limiter.Window{Key: w.Key, Policy: w.Policy.Name, Entries: es, Count: f.entries,
			Rules: []limiter.RuleState{{Limit: 100_000, Count: f.entries}}}
		n, _ := f.perWindow.LoadOrStore(Window{Key: w.Key, Policy: w.Policy.Name}, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	f.reads.Add(int64(len(ws)))
	f.total.Add(int64(len(ws) * f.entries))
	return out, make([]error, len(ws))
}

func openPolicy(name string) (limiter.Policy, bool) {
	return limiter.Policy{Name: name, Rules: []limiter.Rule{{Limit: 100_000, Window: time.Hour}}}, true
}

// TestSnapshotReadsKeepWithinTheBudget: 300 watched windows of 1,000 entries
// want 300,000 entries a second of periodic snapshots; with a budget of
// 100,000 the loop reads about that many, every window still gets its
// snapshots (further apart, at the same pace), and the ticks stop riding on
// them. With no budget it reads them all, every second.
func TestSnapshotReadsKeepWithinTheBudget(t *testing.T) {
	const (
		windows = 300
		entries = 1000
		budget  = 100_000
		run     = 4500 * time.Millisecond
	)
	for _, tc := range []struct {
		name   string
		budget int
	}{{"budget", budget}, {"none", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fullWindows{entries: entries}
			v := New(Deps{Instance: "me", SnapshotBudget: tc.budget, Policy: openPolicy, ReadWindows: f.read})
			subs := make([]*hub.Subscription[Window], windows)
			for i := range subs {
				subs[i] = v.hub.Subscribe(Window{Key: fmt.Sprint("full-", i), Policy: "open"})
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			start := time.Now()
			go func() { v.snapshotLoop(ctx); close(done) }()
			time.Sleep(run)
			cancel()
			<-done
			took := time.Since(start)

			read := float64(f.total.Load())
			// What the budget allows in that time, with what an idle instance
			// saves and one round's reads before their size is known.
			allowed := budget*took.Seconds() + budget*budgetSaved.Seconds() + float64(windows*entries)/20
			t.Logf("%s: %d reads, %.0f entries a second over %v (budget %d)", tc.name, f.reads.Load(), read/took.Seconds(), took, tc.budget)
			if tc.budget == 0 {
				if read <= allowed {
					t.Errorf("with no budget %0.f entries were read, want all the windows' (%d a second)", read, windows*entries)
				}
				return
			}
			if read > allowed {
				t.Errorf("%.0f entries read in %v, want at most %.0f", read, took, allowed)
			}
			if !v.thinned() {
				t.Error("periodic snapshots were put off but the ticks still ride on them")
			}
			// Every window got its turn: the most overdue goes first.
			for i, s := range subs {
				if msgs, _ := s.Take(nil, 4<<20); len(msgs) == 0 {
					t.Fatalf("window %d got no snapshot in %v", i, took)
				}
			}
		})
	}
}

// TestOneReadPerWindowPerRound: a crowd joining one window at once shares
// one read; viewers that subscribe after it started share the next one,
// which starts 50 ms after it; and the snapshot loop publishes a read a
// viewer made moments before instead of reading again.
func TestOneReadPerWindowPerRound(t *testing.T) {
	f := &fullWindows{entries: 10}
	v := New(Deps{Instance: "me", SnapshotBudget: DefaultSnapshotBudget, Policy: openPolicy, ReadWindows: f.read, CheckTimeout: time.Second})
	w := Window{Key: "crowd", Policy: "open"}
	sub := v.hub.Subscribe(w)
	crowd := func(n int, since time.Time) int64 {
		var wg sync.WaitGroup
		var got atomic.Int64
		for range n {
			wg.Go(func() {
				if snap, ok := v.snapshot(w, since); ok && len(snap) > 0 {
					got.Add(1)
				}
			})
		}
		wg.Wait()
		return got.Load()
	}
	if got := crowd(200, time.Now()); got != 200 || f.reads.Load() != 1 {
		t.Fatalf("200 viewers joining at once: %d got a snapshot from %d reads, want 200 from 1", got, f.reads.Load())
	}
	start := time.Now()
	if got := crowd(100, time.Now()); got != 100 || f.reads.Load() != 2 {
		t.Fatalf("100 viewers joining after that read: %d got a snapshot from %d reads in all, want 100 from a second read", got, f.reads.Load())
	}
	if took := time.Since(start); took < snapshotCoalesce/2 {
		t.Errorf("the second read came %v after the first, want about %v", took, snapshotCoalesce)
	}
	sizes := v.publishSnapshots(context.Background(), []snapshotDue{{w: w, groups: 1, periodic: true}})
	if sizes[0].bytes <= 0 || f.reads.Load() != 2 {
		t.Fatalf("the loop right after: sizes %v from %d reads, want the viewers' read published", sizes, f.reads.Load())
	}
	if msgs, _ := sub.Take(nil, 1<<20); len(msgs) != 1 {
		t.Fatalf("the window's viewer took %d messages, want the snapshot", len(msgs))
	}
}
