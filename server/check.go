package server

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// failOpenJSON is the check's answer when Redis failed and the fail mode is open.
type failOpenJSON struct {
	Allowed  bool   `json:"allowed"`
	FailOpen bool   `json:"failOpen"`
	Key      string `json:"key"`
	Policy   string `json:"policy"`
}

// oldest maps the limiter's -1 for "empty" to JSON null.
func oldest(ms int64) *int64 {
	if ms < 0 {
		return nil
	}
	return &ms
}

// newMiddleware is how every HTTP entry point decides (the check API, forward
// auth): one code path for headers, problem documents and fail modes. Its
// hooks are checkHooks, which the Envoy rate limit service shares.
func newMiddleware(a *app) *httplimit.Middleware {
	failMode := httplimit.FailClosed
	if a.cfg.FailMode == FailOpen {
		failMode = httplimit.FailOpen
	}
	h := checkHooks{a}
	return httplimit.New(a.lim,
		httplimit.WithFailMode(failMode),
		httplimit.WithTimeout(a.cfg.CheckTimeout),
		httplimit.WithHooks(httplimit.Hooks{
			Start: h.started,
			Done: func(policy string, took time.Duration, err error) {
				h.finished()
				h.took(took)
				if err == nil {
					return
				}
				h.failed(policy, err)
				if failMode == httplimit.FailOpen {
					h.failedOpen(policy)
				}
			},
			Decision: h.decided,
		}))
}

// countDecision counts d under its policy's prepared counters: allowed,
// denied, or shadow_denied for a shadow policy's would-deny (SPEC §9).
func (a *app) countDecision(d limiter.Decision) {
	p, ok := a.store.load().policy(d.Policy)
	if !ok { // the policy went away in a reload while this check ran
		a.metrics.decisions.WithLabelValues(d.Policy, outcome(d)).Inc()
		return
	}
	switch {
	case d.Allowed:
		p.allowed.Inc()
	case d.WouldDeny():
		p.shadowDenied.Inc()
	default:
		p.denied.Inc()
	}
}

// outcome is d's label in ratescope_decisions_total.
func outcome(d limiter.Decision) string {
	switch {
	case d.Allowed:
		return "allowed"
	case d.WouldDeny():
		return "shadow_denied"
	}
	return "denied"
}

// handleCheck decides and records one request: POST /api/v1/check. It reads
// its own parameters and writes its own JSON body; everything else is the
// middleware's.
func handleCheck(store *configStore, mw *httplimit.Middleware, auth authorizer) echo.HandlerFunc {
	return func(c echo.Context) error {
		set := store.load()
		p, err := readParams(c, fieldKey, fieldPolicy, fieldCost)
		if err != nil {
			return err
		}
		key := p.key()
		pol := p.policy(set)
		cost := 1
		if !p.failed("policy") {
			cost = p.integer("cost", 1, 1, pol.MaxCost())
		}
		if err := p.problem(); err != nil {
			return err
		}
		if err := auth.authorize(c, pol.Name, false); err != nil {
			return err
		}
		res := mw.Check(c.Response(), c.Request(), httplimit.Target{Key: key, Policy: pol.Policy, Cost: cost})
		switch {
		case !res.Pass:
			return nil // answered: denied, failed closed
		case res.Err != nil:
			return c.JSON(http.StatusOK, failOpenJSON{Allowed: true, FailOpen: true, Key: key, Policy: pol.Name})
		}
		return c.JSONBlob(http.StatusOK, httplimit.NewDecisionBody(res.Decision).AppendJSON(make([]byte, 0, 512)))
	}
}
