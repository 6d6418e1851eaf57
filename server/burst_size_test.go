//go:build !race

package server_test

import "time"

// Issue 10's figures for TestBurstReachesEveryViewer.
const (
	burstChecks     = 5000             // checks per burst
	burstLatency    = time.Second      // each decision reaches every reader within this of its nowMs
	burstDropWithin = 10 * time.Second // the non-reader is dropped within this of the first burst
)
