package main

import (
	"fmt"
	"slices"
	"time"
)

// latencies summarises durations.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func (l latencies) summary() string {
	return fmt.Sprintf("p50 %s · p90 %s · p99 %s · max %s", ms(l.pct(.50)), ms(l.pct(.90)), ms(l.pct(.99)), ms(l.pct(1)))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
