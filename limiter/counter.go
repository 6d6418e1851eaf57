package limiter

import (
	_ "embed"
	"encoding/json"
)

//go:embed counter.lua
var counterSrc string

// Counter is the sliding-window counter: the previous aligned window's
// count, weighted by how much of it still overlaps, plus the current one.
const Counter Algorithm = "counter"

func init() {
	register(2, Descriptor{
		Name:        Counter,
		Title:       "Sliding-window counter",
		Caption:     "Sliding-window counter: the previous window's count, weighted by how much of it the sliding window still covers, plus the current window's count; two counters, an approximation.",
		Tradeoff:    "Two counters: the previous window's count weighted by how much of it still overlaps, plus the current one; close to the log, yet an estimate.",
		ExactLimit:  MaxLimit,
		ExactWindow: MaxWindow,
	}, stateAlgorithm{
		name:   Counter,
		script: newStateScript(counterSrc),
		describe: func(s *RuleState, nowMs int64, raw [3]int64) {
			c := &CounterState{WindowStartMs: raw[0], Previous: int(raw[1]), Current: int(raw[2])}
			left := float64(s.WindowMs - (nowMs - c.WindowStartMs))
			c.Weight = left / float64(s.WindowMs)
			c.Estimate = float64(c.Previous)*left/float64(s.WindowMs) + float64(c.Current)
			s.State = c
		},
	})
}

// CounterState is a sliding-window-counter rule's two counters.
//
// Example: 100/1m, 40 requests in the previous minute and 20 so far in this
// one, 15 s into it: Weight = 45/60, Estimate = 40 × 0.75 + 20 = 50, so 50
// more fit now.
type CounterState struct {
	// WindowStartMs is where the current window began: a multiple of the
	// window on Redis's clock.
	WindowStartMs int64
	// Previous and Current are the requests counted in the previous and the
	// current aligned window.
	Previous int
	Current  int
	// Weight is the previous window's share, (window − elapsed) / window.
	Weight float64
	// Estimate is Previous × Weight + Current: what the rule compares with
	// its limit (RuleState.Count is it rounded up).
	Estimate float64
}

// Algorithm is Counter.
func (*CounterState) Algorithm() Algorithm { return Counter }

// MarshalJSON is the wire form: {"windowStartMs", "prevCount", "currCount",
// "weight", "estimate"}, the fractions to three decimals.
func (c *CounterState) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		WindowStartMs int64   `json:"windowStartMs"`
		PrevCount     int     `json:"prevCount"`
		CurrCount     int     `json:"currCount"`
		Weight        float64 `json:"weight"`
		Estimate      float64 `json:"estimate"`
	}{c.WindowStartMs, c.Previous, c.Current, round3(c.Weight), round3(c.Estimate)})
}
