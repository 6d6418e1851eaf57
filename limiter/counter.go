package limiter

import _ "embed"

//go:embed counter.lua
var counterSrc string

// counterAlgorithm is the sliding-window counter: windows aligned like fixed's,
// allowed iff previous × (window − elapsed)/window + current + cost <= limit.
var counterAlgorithm = stateAlgorithm{
	name:   Counter,
	script: newStateScript(counterSrc),
	describe: func(s *RuleState, nowMs int64, raw [3]int64) {
		c := &CounterState{WindowStartMs: raw[0], Previous: int(raw[1]), Current: int(raw[2])}
		elapsed := nowMs - c.WindowStartMs
		c.Estimate = float64(c.Previous)*float64(s.WindowMs-elapsed)/float64(s.WindowMs) + float64(c.Current)
		s.Counter = c
	},
}

// CounterState is a sliding-window-counter rule's two counters.
//
// Example: 100/1m, 40 requests in the previous minute and 20 so far in this
// one, 15 s into it: Estimate = 40 × 45/60 + 20 = 50, so 50 more fit now.
type CounterState struct {
	// WindowStartMs is where the current window began: a multiple of the
	// window on Redis's clock.
	WindowStartMs int64
	// Previous and Current are the requests counted in the previous and the
	// current aligned window.
	Previous int
	Current  int
	// Estimate is Previous × (window − elapsed)/window + Current: what the
	// rule compares with its limit (RuleState.Count is it rounded up).
	Estimate float64
}
