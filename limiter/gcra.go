package limiter

import _ "embed"

//go:embed gcra.lua
var gcraSrc string

// gcraAlgorithm is the generic cell rate algorithm with go-redis/redis_rate's
// semantics: emission interval window/limit, burst limit.
var gcraAlgorithm = stateAlgorithm{
	name:   GCRA,
	script: newStateScript(gcraSrc),
	describe: func(s *RuleState, _ int64, raw [3]int64) {
		s.GCRA = &GCRAState{TATMs: float64(raw[0]) + float64(raw[1])/float64(s.Limit)}
	},
}

// GCRAState is a GCRA rule's one timestamp.
//
// Example: 10/1m (one request every 6 s, a burst of 10). Three requests at
// t=0 on a fresh key move the TAT to 18,000: 7 more fit now, and the whole
// burst is back at t=18,000.
type GCRAState struct {
	// TATMs is the theoretical arrival time on Redis's clock, never before
	// now: each request moves it on by cost × window/limit, and a request
	// fits while it would stay within one window of now. (Redis keeps it
	// exactly, as whole ms plus a fraction of the limit.)
	TATMs float64
}
