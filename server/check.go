package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
)

// failOpenJSON is the check's answer when Redis failed and the fail mode is open.
type failOpenJSON struct {
	Allowed  bool   `json:"allowed"`
	FailOpen bool   `json:"failOpen"`
	Key      string `json:"key"`
	Policy   string `json:"policy"`
	// Explain is there when asked (explain=1): no decision was made.
	Explain *httplimit.Explanation `json:"explain,omitempty"`
}

// fieldExplain asks a check to say why (explain=1): its answer, 200 or
// 429, carries the decision's explanation (httplimit.Explain).
var fieldExplain = field{name: "explain", integer: true}

// checkAPI is what POST /api/v1/check uses.
type checkAPI struct {
	store   *configStore
	checker *httplimit.Checker
	auth    authorizer
	waiters *waiters
	live    *live.View
	log     *slog.Logger
	// redisUp reports whether Redis accepts writes now (readiness): a
	// held check whose slot comes while it does not gets the fail mode's
	// answer instead of its booking's.
	redisUp func() bool
}

// handleCheck decides and records one request: POST /api/v1/check. It reads
// its own parameters and writes its own JSON body; everything else is the
// Checker's. A check with wait may book a slot and be held until it (hold).
func handleCheck(a checkAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		set := a.store.load()
		p, err := readParams(c, fieldKey, fieldPolicy, fieldCost, fieldWait, fieldExplain)
		if err != nil {
			return err
		}
		key := p.key()
		pol := p.policy(set)
		// The rules in force for this key — an override's, or the
		// policy's — bound its cost.
		rules := pol.Policy
		if !p.failed("key") && !p.failed("policy") {
			rules = a.checker.PolicyFor(key, pol.Policy)
		}
		cost := 1
		if !p.failed("policy") {
			cost = p.integer("cost", 1, 1, rules.MaxCost())
		}
		wait := p.duration("wait", limiter.MaxWait)
		explain := p.integer("explain", 0, 0, 1) == 1
		if err := p.problem(); err != nil {
			return err
		}
		if err := limiter.ValidateWait(wait, rules.Policy); err != nil {
			detail := "wait: policy " + pol.Name + " uses algorithm " + string(rules.AlgorithmName()) + ", which cannot book a slot; waiting needs algorithm log"
			pr := newProblem(http.StatusConflict, detail)
			pr.Errors = []httplimit.FieldError{{Field: "wait", Detail: detail}}
			return pr
		}
		if err := a.auth.authorize(c, pol.Name, false); err != nil {
			return err
		}
		t := httplimit.Target{Key: key, Policy: rules, Cost: cost, Wait: wait, Explain: explain}
		// A place to be held is reserved before the check is sent: a
		// booking is never made that this instance could not hold. Without
		// one the check cannot wait.
		placed := wait > 0 && a.waiters.take()
		if !placed {
			t.Wait = 0
		}
		res := a.checker.CheckHTTP(c.Response(), c.Request(), t)
		d := res.Decision
		booked := res.Err == nil && d.Booked()
		if placed && !booked {
			a.waiters.give()
		}
		if !placed && wait > 0 && res.Err == nil && d.Denied() && !d.Locked && d.RetryAfterMs <= wait.Milliseconds() {
			a.waiters.refused.Inc() // it would have booked
		}
		switch {
		case !res.Pass:
			return nil // answered: denied, failed closed
		case res.Err != nil:
			body := failOpenJSON{Allowed: true, FailOpen: true, Key: key, Policy: pol.Name}
			if explain {
				e := httplimit.ExplainFailOpen()
				body.Explain = &e
			}
			return c.JSON(http.StatusOK, body)
		case booked:
			defer a.waiters.give()
			return a.hold(c, res, explain)
		}
		body := httplimit.NewDecisionBody(d)
		if explain {
			e := httplimit.Explain(d, res.Policy.Policy)
			body.Explain = &e
		}
		return c.JSONBlob(http.StatusOK, body.AppendJSON(make([]byte, 0, 512)))
	}
}

// hold holds a booked check until its slot, then answers it allowed with
// waitedMs (and, when asked, the explanation). When the client goes away first, or the server shuts down, the
// booking is refunded — room for a new request; the checks held behind it
// keep the later slots they booked — and viewers see the refund. A refund
// Redis cannot take (Redis down) leaves the entries to slide out.
func (a checkAPI) hold(c echo.Context, res httplimit.Result, explain bool) error {
	ctx := c.Request().Context()
	// The server's read timeout counts from the request's start: past it,
	// the connection's read — which notices a client going away — would
	// fail and end the request before its slot. A held check reads
	// nothing more, so its connection waits without one; the next request
	// on it gets its own.
	_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Time{})
	waited, err := a.waiters.hold(ctx, res.Decision)
	if err == nil && a.redisUp != nil && !a.redisUp() {
		return a.failAtSlot(c, res)
	}
	if err == nil {
		a.waiters.served.Inc()
		body := httplimit.NewDecisionBody(res.Decision)
		body.WaitedMs = max(1, waited.Milliseconds())
		if explain {
			e := httplimit.Explain(res.Decision, res.Policy.Policy)
			body.Explain = &e
		}
		return c.JSONBlob(http.StatusOK, body.AppendJSON(make([]byte, 0, 512)))
	}
	a.waiters.abandoned.Inc()
	t := httplimit.Target{Key: res.Decision.Key, Policy: res.Policy}
	adj, rerr := a.checker.Refund(context.WithoutCancel(ctx), t, res.Decision.ID)
	if rerr != nil {
		a.log.Warn("failed to refund an abandoned booking; its entries count until they slide out",
			"key", t.Key, "policy", t.Policy.Name, "id", res.Decision.ID, "err", rerr)
	} else {
		a.live.Adjustment(live.AdjustRefund, adj)
	}
	if errors.Is(err, errStopping) {
		return unavailable("the server is shutting down; the booked slot was given back")
	}
	return nil // the client is gone: nobody to answer
}

// failAtSlot answers a held check whose slot came while Redis does not
// accept writes as any check is answered then, by the fail mode: closed,
// 503 with Retry-After; open, allowed without RateLimit fields. The booking
// stays where Redis has it (it cannot be refunded now); no RateLimit field
// set when it was booked is sent.
func (a checkAPI) failAtSlot(c echo.Context, res httplimit.Result) error {
	h := c.Response().Header()
	h.Del("RateLimit")
	h.Del("RateLimit-Policy")
	if a.checker.FailMode != httplimit.FailOpen {
		return unavailable("Redis stopped accepting writes while this check waited for its slot; retry shortly")
	}
	return c.JSON(http.StatusOK, failOpenJSON{Allowed: true, FailOpen: true, Key: res.Decision.Key, Policy: res.Policy.Name})
}
