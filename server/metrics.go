package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are registered on a registry of the server's own, so several
// servers can run in one process (as the tests do).
type metrics struct {
	reg           *prometheus.Registry
	decisions     *prometheus.CounterVec
	failOpen      *prometheus.CounterVec
	checkDuration prometheus.Histogram
	redisErrors   *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_decisions_total",
			Help: "Checks decided by Redis, by policy and outcome.",
		}, []string{"policy", "outcome"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_fail_open_total",
			Help: "Checks allowed without a decision because Redis failed and the fail mode is open.",
		}, []string{"policy"}),
		checkDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratescope_check_duration_seconds",
			Help:    "Time the limiter took to decide one check, including Redis.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5},
		}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratescope_redis_errors_total",
			Help: "Redis calls that failed or timed out, by operation.",
		}, []string{"op"}),
	}
	m.reg.MustRegister(m.decisions, m.failOpen, m.checkDuration, m.redisErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
