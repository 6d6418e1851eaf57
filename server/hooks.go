package server

import (
	"time"

	"github.com/ratescope/ratescope/limiter"
)

// checkHooks observe every check of every entry point — the HTTP middleware
// (check API, forward auth) and the Envoy rate limit service — so each check
// is timed, counted, logged and streamed to viewers the same way whichever
// door it came in by.
type checkHooks struct{ a *app }

// started and finished bracket one limiter call: ratescope_checks_in_flight.
func (h checkHooks) started()  { h.a.metrics.checksActive.Inc() }
func (h checkHooks) finished() { h.a.metrics.checksActive.Dec() }

// took observes how long one limiter call took, Redis included.
func (h checkHooks) took(d time.Duration) { h.a.metrics.checkDuration.Observe(d.Seconds()) }

// failed counts a limiter call that Redis failed or timed out, and tells
// readiness, whose outage log speaks for all of them: a line per failed
// check is debug-level only.
func (h checkHooks) failed(policy string, err error) {
	h.a.metrics.redisErrors.WithLabelValues("check").Inc()
	h.a.ready.CheckFailed(err)
	h.a.log.Debug("check failed", "policy", policy, "fail_mode", h.a.cfg.FailMode, "err", err)
}

// failedOpen counts a check allowed without a decision (fail mode open).
func (h checkHooks) failedOpen(policy string) { h.a.metrics.failOpen.WithLabelValues(policy).Inc() }

// decided counts a decision, tells readiness that Redis answered (unless the
// local deny cache did) and sends it to the live view.
func (h checkHooks) decided(d limiter.Decision) {
	if !d.Cached {
		h.a.ready.CheckSucceeded()
	}
	h.a.countDecision(d)
	h.a.live.Decision(d)
}
