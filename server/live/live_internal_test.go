package live

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live/hub"
)

func TestSpacingKeepsWindowFramesWithinBudget(t *testing.T) {
	for _, c := range []struct {
		viewers int
		want    time.Duration
	}{
		{0, snapshotCoalesce},
		{1, snapshotCoalesce},
		{1000, snapshotCoalesce}, // exactly the budget: not spaced
		{1001, 50050 * time.Microsecond},
		{10_000, 500 * time.Millisecond},
		{100_000, 5 * time.Second}, // callers cap it (snapshots still come every second)
	} {
		got := spacing(c.viewers)
		if got != c.want {
			t.Errorf("spacing(%d) = %s, want %s", c.viewers, got, c.want)
		}
		if perSecond := float64(c.viewers) / got.Seconds(); perSecond > fanoutBudget {
			t.Errorf("spacing(%d) = %s gives %.0f frames/s, over %d", c.viewers, got, perSecond, fanoutBudget)
		}
	}
}

// TestSnapshotSpacingCountsBytes: a snapshot larger than a socket write counts
// as a frame per write, so large windows are sent to large audiences less often.
func TestSnapshotSpacingCountsBytes(t *testing.T) {
	for _, c := range []struct {
		viewers, size int
		want          time.Duration
	}{
		{1000, 100, snapshotCoalesce},
		{1000, 2 * writeUnit, 150 * time.Millisecond},
		{10, 60_000, snapshotCoalesce},
		{2000, 60_000, 1500 * time.Millisecond}, // callers cap it at a second
	} {
		if got := snapshotSpacing(c.viewers, c.size); got != c.want {
			t.Errorf("snapshotSpacing(%d, %d) = %s, want %s", c.viewers, c.size, got, c.want)
		}
	}
}

func TestDueAllowsTickerJitter(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		since, gap time.Duration
		want       bool
	}{
		{0, snapshotCoalesce, false},
		{snapshotCoalesce - time.Millisecond, snapshotCoalesce, true}, // a tick that came a little early
		{snapshotCoalesce / 4, snapshotCoalesce, false},
		{time.Second - 2*time.Millisecond, time.Second, true},
		{900 * time.Millisecond, time.Second, false},
	} {
		if got := due(t0.Add(c.since), t0, c.gap); got != c.want {
			t.Errorf("due(+%s, gap %s) = %v, want %v", c.since, c.gap, got, c.want)
		}
	}
}

func TestTickShareThinsLargeAudiencesToAtLeastOneASecond(t *testing.T) {
	for _, c := range []struct {
		viewers  int
		interval time.Duration
		want     uint64
	}{
		{0, 100 * time.Millisecond, 1},
		{500, 100 * time.Millisecond, 1}, // exactly the budget: every viewer, every tick
		{501, 100 * time.Millisecond, 2},
		{2000, 100 * time.Millisecond, 4},
		{4000, 100 * time.Millisecond, 8},
		{4500, 100 * time.Millisecond, 9},
		{4501, 100 * time.Millisecond, 0}, // one a second each: the snapshots carry them
		{10_000, 100 * time.Millisecond, 0},
		{1_000_000, 100 * time.Millisecond, 0},
		{1_000_000, 10 * time.Millisecond, 0},
		{1_000_000, time.Second, 1}, // once a second already: never more ticks than the interval
		{1_000_000, 2 * time.Second, 1},
		{1_000_000, 3 * time.Second, 1}, // slower than once a second already
	} {
		got := tickShare(c.viewers, c.interval)
		if got != c.want {
			t.Errorf("tickShare(%d, %s) = %d, want %d", c.viewers, c.interval, got, c.want)
		}
		if gap := time.Duration(got) * c.interval; gap > tickAtLeast && c.interval <= tickAtLeast {
			t.Errorf("tickShare(%d, %s): a viewer waits %s for a tick, over %s", c.viewers, c.interval, gap, tickAtLeast)
		}
		if got == 0 {
			continue // one a second, with the periodic snapshots
		}
		if perSecond := float64(c.viewers) / (time.Duration(got) * c.interval).Seconds(); got < uint64(tickAtLeast/c.interval) && perSecond > tickBudget {
			t.Errorf("tickShare(%d, %s) = %d gives %.0f ticks/s, over %d", c.viewers, c.interval, got, perSecond, tickBudget)
		}
	}
}

// Another instance's events arrive several to a PUBLISH; each reaches this
// instance's viewers of its window, in order, and this instance's own are ignored.
func TestReceiveBatchedEnvelopes(t *testing.T) {
	v := New(Deps{Instance: "me"})
	w := Window{Key: "alice", Policy: "demo"}
	sub := v.hub.Subscribe(w)
	other := v.hub.Subscribe(Window{Key: "bob", Policy: "demo"})
	env := func(origin, kind string, w Window, msg string) bus.Envelope {
		return bus.Envelope{Origin: origin, Kind: kind, Topic: w.Topic(), Msg: json.RawMessage(msg)}
	}
	v.receive(encode([]bus.Envelope{
		env("them", bus.TypeDecision, w, `{"n":1}`),
		env("me", bus.TypeDecision, w, `{"n":"mine"}`),
		env("them", bus.TypeReset, w, `{"n":2}`),
		{Origin: "them", Kind: bus.KindPresence, Topic: w.Topic(), Viewers: 3},
		env("them", bus.TypeRace, w, `{"n":3}`),
	}))
	v.receive(encode(env("them", bus.TypeDecision, w, `{"n":4}`))) // one envelope alone
	v.receive([]byte(`[not json`))

	got, _ := sub.Take(nil, 1<<20)
	var ns []string
	for _, m := range got {
		ns = append(ns, string(m))
	}
	if want := []string{`{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`}; !slices.Equal(ns, want) {
		t.Errorf("the viewer got %q, want %q", ns, want)
	}
	if got, _ := other.Take(nil, 1<<20); len(got) != 0 {
		t.Errorf("a viewer of another window got %q", got)
	}
	if !v.presence.remote.Watched(w) {
		t.Error("the presence in the batch was not recorded")
	}
}

// TestPeriodicSnapshotsCarryTheTick: while a large audience gets its ticks with
// the periodic snapshots, a window's viewers take tick and snapshot in one
// frame, a lab's viewers (no snapshot) the tick alone; a change-driven
// snapshot carries none; and when Redis fails the window is not done and the
// ticks stop relying on snapshots.
func TestPeriodicSnapshotsCarryTheTick(t *testing.T) {
	fail := false
	v := New(Deps{
		Instance: "me",
		Policy: func(name string) (limiter.Policy, bool) {
			return limiter.Policy{Name: name, Rules: []limiter.Rule{{Limit: 5, Window: 10 * time.Second}}}, name == "demo"
		},
		ReadWindows: func(_ context.Context, ws []limiter.WindowOf) ([]limiter.Window, []error) {
			out, errs := make([]limiter.Window, len(ws)), make([]error, len(ws))
			for i, w := range ws {
				if fail {
					errs[i] = errors.New("redis down")
				}
				out[i] = limiter.Window{Key: w.Key, Policy: w.Policy.Name, Rules: []limiter.RuleState{{Limit: 5}}}
			}
			return out, errs
		},
	})
	w, lab := Window{Key: "alice", Policy: "demo"}, labWindow("lab-1")
	ws, lw := v.hub.Subscribe(w), v.hub.Subscribe(lab)
	tick := TickMessage(42)
	v.clock.ride.Store(&tick)
	types := func(s *hub.Subscription[Window]) []string {
		got, _ := s.Take(nil, 1<<20)
		var out []string
		for _, m := range got {
			var msg struct{ Type string }
			_ = json.Unmarshal(m, &msg)
			out = append(out, msg.Type)
		}
		return out
	}

	if sizes := v.publishSnapshots(context.Background(), []snapshotDue{{w: w, groups: 1, periodic: true}, {w: lab, groups: 1, periodic: true}}); sizes[0].bytes <= 0 || sizes[1].bytes != 0 {
		t.Fatalf("sizes %v, want the window's snapshot and none for the lab", sizes)
	}
	if got := types(ws); !slices.Equal(got, []string{bus.TypeTick, bus.TypeSnapshot}) {
		t.Errorf("the window's viewer took %v in one go, want tick and snapshot", got)
	}
	if got := types(lw); !slices.Equal(got, []string{bus.TypeTick}) {
		t.Errorf("the lab's viewer took %v, want the tick", got)
	}
	v.publishSnapshots(context.Background(), []snapshotDue{{w: w, groups: 1}})
	if got := types(ws); !slices.Equal(got, []string{bus.TypeSnapshot}) {
		t.Errorf("after a change the viewer took %v, want the snapshot alone", got)
	}
	fail = true
	if sizes := v.publishSnapshots(context.Background(), []snapshotDue{{w: w, groups: 1, periodic: true}}); sizes[0].bytes != -1 || !v.snapshotsFailing.Load() {
		t.Errorf("with Redis failing: sizes %v, snapshotsFailing %v; want -1, true", sizes, v.snapshotsFailing.Load())
	}
}

// TestLargeAudiencesTakeSnapshotsInTurns: 2,000 viewers of one window (eight
// groups) get their snapshots a group at a time, never all in one
// round, and each viewer still gets one at least every second; a window with
// a few viewers still gets one soon after each change.
func TestLargeAudiencesTakeSnapshotsInTurns(t *testing.T) {
	v := New(Deps{
		Instance: "me",
		Policy: func(name string) (limiter.Policy, bool) {
			return limiter.Policy{Name: name, Rules: []limiter.Rule{{Limit: 5, Window: 10 * time.Second}}}, true
		},
		ReadWindows: func(_ context.Context, ws []limiter.WindowOf) ([]limiter.Window, []error) {
			out := make([]limiter.Window, len(ws))
			for i, w := range ws {
				out[i] = limiter.Window{Key: w.Key, Policy: w.Policy.Name, Rules: []limiter.RuleState{{Limit: 5}}}
			}
			return out, make([]error, len(ws))
		},
	})
	const n = 2000
	big, small := Window{Key: "crowd", Policy: "demo"}, Window{Key: "few", Policy: "demo"}
	subs := make([]*hub.Subscription[Window], n)
	for i := range subs {
		subs[i] = v.hub.Subscribe(big)
	}
	few := v.hub.Subscribe(small)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { v.snapshotLoop(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Poll every viewer every few ms; note when each takes a snapshot.
	got := make([][]time.Time, n)
	start := time.Now()
	var changedAt, fewGot time.Time
	for time.Since(start) < 3500*time.Millisecond {
		if changedAt.IsZero() && time.Since(start) > 1500*time.Millisecond {
			changedAt = time.Now()
			v.snapshots.markDirty(small)
		}
		for i, s := range subs {
			if msgs, _ := s.Take(nil, 1<<20); len(msgs) > 0 {
				got[i] = append(got[i], time.Now())
			}
		}
		if msgs, _ := few.Take(nil, 1<<20); len(msgs) > 0 && !changedAt.IsZero() && fewGot.IsZero() {
			fewGot = time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The most viewers that took a snapshot within any 40 ms: a group or two,
	// not the audience.
	var all []time.Time
	for i, ts := range got {
		if len(ts) < 2 {
			t.Fatalf("viewer %d took %d snapshots in 3.5 s, want at least 2 (one a second)", i, len(ts))
		}
		for j := 1; j < len(ts); j++ {
			if gap := ts[j].Sub(ts[j-1]); gap > 1500*time.Millisecond {
				t.Errorf("viewer %d waited %s between snapshots, want about a second at most", i, gap)
				break
			}
		}
		all = append(all, ts...)
	}
	slices.SortFunc(all, time.Time.Compare)
	most := 0
	for lo, hi := 0, 0; hi < len(all); hi++ {
		for all[hi].Sub(all[lo]) > 40*time.Millisecond {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	if most > n/2 {
		t.Errorf("%d of %d viewers took a snapshot within 40 ms; want the audience served in turns", most, n)
	}
	if fewGot.IsZero() || fewGot.Sub(changedAt) > 250*time.Millisecond {
		t.Errorf("a window with one viewer got its snapshot %s after a change, want within the coalescing gap", fewGot.Sub(changedAt))
	}
}
