package server

import (
	"testing"
	"time"
)

func TestThinKeepsPeriodicFramesWithinBudget(t *testing.T) {
	for _, c := range []struct {
		viewers int
		period  time.Duration
		want    int
	}{
		{0, 100 * time.Millisecond, 1},
		{1, 10 * time.Millisecond, 1},
		{2000, 100 * time.Millisecond, 1}, // exactly the budget: not thinned
		{2001, 100 * time.Millisecond, 2},
		{10_000, 100 * time.Millisecond, 5},
		{10_000, 50 * time.Millisecond, 10},
		{1000, 50 * time.Millisecond, 1},
		{1001, 50 * time.Millisecond, 2},
		{500, time.Second, 1},
	} {
		got := thin(c.viewers, c.period)
		if got != c.want {
			t.Errorf("thin(%d, %s) = %d, want %d", c.viewers, c.period, got, c.want)
		}
		// Whatever the audience, the thinned rate stays within the budget.
		if perSecond := float64(c.viewers) / (float64(got) * c.period.Seconds()); perSecond > fanoutBudget {
			t.Errorf("thin(%d, %s) = %d gives %.0f frames/s, over %d", c.viewers, c.period, got, perSecond, fanoutBudget)
		}
	}
}
