package limiter

import _ "embed"

//go:embed fixed.lua
var fixedSrc string

// fixedAlgorithm counts requests per window aligned to multiples of the
// window on Redis's clock: allowed iff count + cost <= limit.
var fixedAlgorithm = stateAlgorithm{
	name:   Fixed,
	script: newStateScript(fixedSrc),
	describe: func(s *RuleState, _ int64, raw [3]int64) {
		s.Fixed = &FixedState{WindowStartMs: raw[0], Count: int(raw[1])}
	},
}

// FixedState is a fixed-window rule's one counter.
type FixedState struct {
	// WindowStartMs is where the current window began on Redis's clock: a
	// multiple of the window (a 1m window starts at every whole minute).
	WindowStartMs int64
	// Count is the requests counted in the current window.
	Count int
}
