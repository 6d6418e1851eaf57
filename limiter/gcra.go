package limiter

import (
	_ "embed"
	"encoding/json"
	"math"
)

//go:embed gcra.lua
var gcraSrc string

// GCRA is the generic cell rate algorithm as go-redis/redis_rate runs it:
// one theoretical arrival time, emission interval window/limit, burst limit.
const GCRA Algorithm = "gcra"

func init() {
	register(3, Descriptor{
		Name:        GCRA,
		Title:       "GCRA",
		Caption:     "GCRA: one timestamp, the theoretical arrival time (TAT); each request pushes it on by window / limit, and a request fits while the TAT stays within one window of now.",
		Tradeoff:    "One timestamp, the theoretical arrival time: a burst of up to limit, then one request per window ÷ limit, as go-redis/redis_rate does.",
		ExactLimit:  MaxLimit,
		ExactWindow: MaxWindow,
	}, stateAlgorithm{
		name:   GCRA,
		script: newStateScript(gcraSrc),
		describe: func(s *RuleState, _ int64, raw [3]int64) {
			s.State = &GCRAState{
				TATMs:              float64(raw[0]) + float64(raw[1])/float64(s.Limit),
				EmissionIntervalMs: float64(s.WindowMs) / float64(s.Limit),
			}
		},
	})
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
	// EmissionIntervalMs is window / limit: how far one request moves it.
	EmissionIntervalMs float64
}

// Algorithm is GCRA.
func (*GCRAState) Algorithm() Algorithm { return GCRA }

// MarshalJSON is the wire form: {"tatMs" (rounded up to a whole ms),
// "emissionIntervalMs" (to three decimals)}. A request of cost c fits while
// max(tatMs, now) + c × emissionIntervalMs − now ≤ windowMs.
func (g *GCRAState) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		TatMs              int64   `json:"tatMs"`
		EmissionIntervalMs float64 `json:"emissionIntervalMs"`
	}{int64(math.Ceil(g.TATMs)), round3(g.EmissionIntervalMs)})
}
