package live

import (
	"testing"
	"time"
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
