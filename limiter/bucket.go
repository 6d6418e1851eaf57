package limiter

import (
	_ "embed"
	"encoding/json"
	"math"
)

//go:embed bucket.lua
var bucketSrc string

// Bucket is a token bucket of capacity limit refilled continuously at limit
// per window. It decides exactly as GCRA does (they are the same algorithm)
// and differs in what it stores.
const Bucket Algorithm = "bucket"

func init() {
	register(4, Descriptor{
		Name:        Bucket,
		Title:       "Token bucket",
		Caption:     "Token bucket: up to limit tokens, refilled continuously at limit per window; each request takes its cost in tokens.",
		Tradeoff:    "A bucket of limit tokens refilled continuously at limit per window, one token per request: it decides as GCRA does, storing tokens and a time.",
		ExactLimit:  MaxLimit,
		ExactWindow: MaxWindow,
	}, stateAlgorithm{
		name:   Bucket,
		script: newStateScript(bucketSrc),
		describe: func(s *RuleState, _ int64, raw [3]int64) {
			s.State = &BucketState{Tokens: float64(raw[0]) / float64(s.WindowMs), LastRefillMs: raw[1]}
		},
	})
}

// BucketState is a token-bucket rule's tokens and timestamp.
//
// Example: 10/1m (a token every 6 s, at most 10). Three requests at t=0 on a
// fresh key leave 7 tokens; at t=3000 the bucket holds 7.5 and 7 more fit.
type BucketState struct {
	// Tokens is what the bucket holds at the snapshot's or decision's NowMs,
	// refill included. (Redis keeps it exactly, in 1/window-ms of a token.)
	Tokens float64
	// LastRefillMs is when the stored count was last brought up to date: the
	// last allowed request.
	LastRefillMs int64
}

// Algorithm is Bucket.
func (*BucketState) Algorithm() Algorithm { return Bucket }

// MarshalJSON is the wire form: {"tokens" (rounded down to three decimals,
// so a bucket shown holding 3 tokens lets 3 requests pass), "updatedMs"}.
func (b *BucketState) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Tokens    float64 `json:"tokens"`
		UpdatedMs int64   `json:"updatedMs"`
	}{math.Floor(b.Tokens*1000) / 1000, b.LastRefillMs})
}
