package limiter

import _ "embed"

//go:embed fixed.lua
var fixedSrc string

// Fixed counts requests per window aligned to multiples of the window on
// Redis's clock; a burst straddling a boundary may pass twice.
const Fixed Algorithm = "fixed"

func init() {
	register(1, Descriptor{
		Name:     Fixed,
		Title:    "Fixed window",
		Caption:  "Fixed window: one counter per window aligned on Redis time; it starts again from 0 at each edge, so a burst can pass just before and just after one.",
		Tradeoff: "One counter per window aligned to the clock, emptied at every edge: cheap, but limit requests just before an edge and limit just after it all pass.",
		// One whole-number counter, which Lua keeps exact well past
		// MaxCountedCost: any limit of envoyproxy/ratelimit's files (a uint32).
		ExactLimit: MaxCountedCost,
	}, stateAlgorithm{
		name:   Fixed,
		script: newStateScript(fixedSrc),
		// Only the fixed window counts denied requests too, as
		// envoyproxy/ratelimit's counters do.
		counts: true,
		describe: func(s *RuleState, _ int64, raw [3]int64) {
			s.State = &FixedState{WindowStartMs: raw[0], Count: int(raw[1])}
		},
	})
}

// FixedState is a fixed-window rule's one counter. Its JSON is its wire form:
// {"windowStartMs", "count"}.
type FixedState struct {
	// WindowStartMs is where the current window began on Redis's clock: a
	// multiple of the window (a 1m window starts at every whole minute).
	WindowStartMs int64 `json:"windowStartMs"`
	// Count is the requests counted in the current window.
	Count int `json:"count"`
}

// Algorithm is Fixed.
func (*FixedState) Algorithm() Algorithm { return Fixed }
