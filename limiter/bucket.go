package limiter

import _ "embed"

//go:embed bucket.lua
var bucketSrc string

// bucketAlgorithm is a token bucket of capacity limit refilled continuously at
// limit per window.
var bucketAlgorithm = stateAlgorithm{
	name:   Bucket,
	script: newStateScript(bucketSrc),
	describe: func(s *RuleState, _ int64, raw [3]int64) {
		s.Bucket = &BucketState{Tokens: float64(raw[0]) / float64(s.WindowMs), LastRefillMs: raw[1]}
	},
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
