package server

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
)

// checkMetrics observes every check of every entry point — the check API,
// forward auth and the Envoy rate limit service all decide through one
// httplimit.Checker — so each is timed, counted and logged the same way
// whichever door it came in by. The counts per policy are policyCounters'.
type checkMetrics struct {
	m        *metrics
	log      *slog.Logger
	failMode httplimit.FailMode
}

// Started: ratescope_checks_in_flight.
func (o checkMetrics) Started(httplimit.Target) { o.m.checksActive.Inc() }

// Finished times the limiter call, and counts one that Redis failed or timed
// out.
func (o checkMetrics) Finished(t httplimit.Target, res httplimit.Result, took time.Duration) {
	o.m.checksActive.Dec()
	o.m.checkDuration.Observe(took.Seconds())
	if res.Err != nil {
		o.m.redisErrors.WithLabelValues("check").Inc()
		// One line per check only at debug: readiness logs an outage once.
		o.log.Debug("check failed", "policy", t.Policy.Name, "fail_mode", o.failMode, "err", res.Err)
	}
}

func (checkMetrics) Decided(limiter.Decision) {}

// policyCounters count one policy's checks, prepared with the policy (one
// per config) so a check looks nothing up: decisions by outcome — allowed,
// denied, or shadow_denied for a shadow policy's would-deny — and
// checks allowed because Redis failed and the fail mode is open.
type policyCounters struct {
	allowed, denied, shadowDenied prometheus.Counter
	failOpen                      prometheus.Counter
}

func (m *metrics) policyCounters(policy string) policyCounters {
	return policyCounters{
		allowed:      m.decisions.WithLabelValues(policy, "allowed"),
		denied:       m.decisions.WithLabelValues(policy, "denied"),
		shadowDenied: m.decisions.WithLabelValues(policy, "shadow_denied"),
		failOpen:     m.failOpen.WithLabelValues(policy), // at zero from the start
	}
}

func (policyCounters) Started(httplimit.Target) {}

func (c policyCounters) Finished(_ httplimit.Target, res httplimit.Result, _ time.Duration) {
	if res.FailedOpen() {
		c.failOpen.Inc()
	}
}

func (c policyCounters) Decided(d limiter.Decision) {
	switch {
	case d.Allowed:
		c.allowed.Inc()
	case d.WouldDeny():
		c.shadowDenied.Inc()
	default:
		c.denied.Inc()
	}
}

// adjustmentCounters count one policy's answered refunds and settles,
// prepared with the policy like policyCounters, so every series exists
// (at zero) from the moment the policy does.
type adjustmentCounters struct {
	refunds, settles prometheus.Counter
}

func (m *metrics) adjustmentCounters(policy string) adjustmentCounters {
	return adjustmentCounters{
		refunds: m.adjustments.WithLabelValues(policy, live.AdjustRefund),
		settles: m.adjustments.WithLabelValues(policy, live.AdjustSettle),
	}
}
