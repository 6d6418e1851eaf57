package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/views"
)

// Bounds of a lab's rule (SPEC §8).
const (
	labMaxName     = 64
	labMaxLimit    = 100
	labMinWindowMs = 1000
	labMaxWindowMs = 60_000
	// labPolicy names the lab's policies in Redis: a lab's state lives under
	// the client key "lab:<name>", e.g. rate_limit:{lab:demo}:@lab:fixed. No
	// configured policy can be named so (names are a-z 0-9 _ -), so a lab
	// never shares a key with a real window, whose resets need a token.
	labPolicy = "@lab"
)

var (
	fieldLab      = field{name: "lab"}
	fieldLimit    = field{name: "limit", integer: true}
	fieldWindowMs = field{name: "windowMs", integer: true}
)

// labKey is the client key of a lab's five windows.
func labKey(lab string) string { return "lab:" + lab }

// labPolicies is the rule under every algorithm, in limiter.Algorithms'
// order. Built by hand: a lab's window is whole milliseconds, not whole
// seconds.
func labPolicies(limit int, windowMs int64) []limiter.Policy {
	algorithms := limiter.Algorithms()
	ps := make([]limiter.Policy, len(algorithms))
	for i, a := range algorithms {
		ps[i] = limiter.Policy{
			Name:      labPolicy,
			Rules:     []limiter.Rule{{Limit: limit, Window: time.Duration(windowMs) * time.Millisecond}},
			Algorithm: a.Name,
		}
	}
	return ps
}

// lab validates the lab name: the key alphabet of SPEC §3, 1-64 bytes.
func (p *params) lab() string {
	name, ok := p.values["lab"]
	switch {
	case p.failed("lab"):
	case !ok:
		p.fail("lab", "is required")
	case len(name) > labMaxName || limiter.ValidateKey(name) != nil:
		p.fail("lab", "%q is not a valid lab name: use 1-%d bytes of %s", truncate(name, 80), labMaxName, limiter.KeyAlphabet)
	}
	return name
}

// readLab reads a request whose only parameter is the lab's name.
func readLab(c echo.Context) (string, error) {
	p, err := readParams(c, fieldLab)
	if err != nil {
		return "", err
	}
	lab := p.lab()
	return lab, p.problem()
}

// required reads a whole number in [lo, hi] that must be given.
func (p *params) required(name string, lo, hi int) int {
	if _, ok := p.values[name]; !ok && !p.failed(name) {
		p.fail(name, "is required (from %d to %d)", lo, hi)
		return 0
	}
	return p.integer(name, 0, lo, hi)
}

// labGuardPolicy bounds each client's lab checks: a lab is open to anyone and
// each check runs five scripts, so one client cannot keep Redis busy with
// them. The busiest traffic the page sends — boundary at limit 100 with its
// three retries, 600 checks — fits five times a minute. A cell rate (gcra)
// keeps one timestamp per client where a log would keep an entry per check:
// the guard's own state stays ~100 bytes per address however many checks it
// counts. Its name, like labPolicy's, is one no configured policy can have.
var labGuardPolicy = limiter.Policy{
	Name:      "@lab-guard",
	Rules:     []limiter.Rule{{Limit: 3000, Window: time.Minute}},
	Algorithm: limiter.GCRA,
}

// labAPI is what the lab's routes use: the limiter that decides a lab's
// requests and guards its clients' budgets, the trusted proxies (whose
// clients are counted, not the proxy), who may use the lab, the cap on labs
// in Redis, the recent requests a late tab gets, the live view, the bound on
// Redis calls and the counter of lab checks refused.
type labAPI struct {
	lim     *limiter.Limiter
	store   *configStore
	auth    authorizer
	labs    labRegistry
	recent  labRecent
	live    *live.View
	redis   redisCalls
	refused *prometheus.CounterVec // by reason
}

// guard spends one of the client's lab checks — the client address as
// forward auth finds it — and answers 429 with Retry-After when none is left.
// It is the lab's own budget, not a check: no metrics, no live view, no
// RateLimit fields. When Redis fails, the lab check that follows answers.
func (l labAPI) guard(ctx context.Context, c echo.Context) error {
	addr, err := httplimit.ClientAddr(c.Request(), l.store.load().trusted)
	if err != nil {
		return nil // no address to key by (a malformed X-Forwarded-For from a trusted proxy)
	}
	d, err := l.lim.Allow(ctx, httplimit.JoinKey(httplimit.JoinPlus, "lab", addr), labGuardPolicy, 1)
	if err != nil || !d.Denied() {
		return nil
	}
	l.refused.WithLabelValues(refusedClient).Inc()
	return newProblem(http.StatusTooManyRequests, fmt.Sprintf(
		"this client sent more than %d lab checks in a minute; retry in %d ms", labGuardPolicy.Rules[0].Limit, d.RetryAfterMs)).
		withHeader("Retry-After", httplimit.RetryAfter(d.RetryAfterMs))
}

// handleLabCheck decides one request under all five algorithms for one rule,
// in one round trip: POST /api/v1/lab/check. Labs are a sandbox: no token,
// unless an API token closes them (authorizeLab). A new lab beyond
// --max-labs is refused; labs already running go on.
func handleLabCheck(l labAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := readParams(c, fieldLab, fieldLimit, fieldWindowMs, fieldCost)
		if err != nil {
			return err
		}
		lab := p.lab()
		limit := p.required("limit", 1, labMaxLimit)
		windowMs := p.required("windowMs", labMinWindowMs, labMaxWindowMs)
		maxCost := labMaxLimit // with no valid limit, cost is still checked
		if !p.failed("limit") && limit > 0 {
			maxCost = limit
		}
		cost := p.integer("cost", 1, 1, maxCost)
		if err := p.problem(); err != nil {
			return err
		}
		if err := l.auth.authorizeLab(c); err != nil {
			return err
		}
		// One deadline for the budget, the place and the decision.
		ctx, cancel := l.redis.bound(c)
		defer cancel()
		if err := l.guard(ctx, c); err != nil {
			return err
		}
		ok, retryMs, err := l.labs.admit(ctx, lab, int64(windowMs))
		switch {
		case err != nil:
			return l.redis.failed("lab", "failed to decide in Redis")
		case !ok:
			l.refused.WithLabelValues(refusedLabs).Inc()
			return labsFull(l.labs.max, retryMs)
		}
		ds, err := l.lim.AllowEach(ctx, labKey(lab), labPolicies(limit, int64(windowMs)), cost)
		if err != nil {
			if errors.Is(err, limiter.ErrInvalidCost) {
				return badRequest([]httplimit.FieldError{{Field: "cost", Detail: err.Error()}})
			}
			return l.redis.failed("lab", "failed to decide in Redis")
		}
		out := live.NewLabResult(lab, limit, int64(windowMs), cost, ds)
		if err := l.recent.record(ctx, out); err != nil {
			// Decided all the same: only a tab that joins later misses it.
			l.redis.errors.WithLabelValues("lab").Inc()
		}
		l.live.Lab(out)
		return c.JSON(http.StatusOK, out)
	}
}

// handleLabReset empties a lab's five windows: DELETE /api/v1/lab?lab=.
func handleLabReset(l labAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		lab, err := readLab(c)
		if err != nil {
			return err
		}
		if err := l.auth.authorizeLab(c); err != nil {
			return err
		}
		if err := l.redis.do(c, "lab", "failed to reset the lab in Redis", func(ctx context.Context) error {
			if err := l.lim.Reset(ctx, labKey(lab), limiter.Policy{Name: labPolicy}); err != nil {
				return err
			}
			return l.recent.forget(ctx, lab)
		}); err != nil {
			return err
		}
		l.live.LabReset(lab)
		return c.NoContent(http.StatusNoContent)
	}
}

// Defaults of the lab page: the rule of the demo policy and the traffic that
// shows what the sliding log prevents.
const (
	labDefaultLimit   = 5
	labDefaultWindowS = 10
	labDefaultTraffic = "boundary"
)

var (
	fieldWindow  = field{name: "window"}
	fieldTraffic = field{name: "traffic"}
)

// handleLabPage renders the lab: GET /lab?lab=&limit=&window=&traffic=
// preselects; with no lab name the page gets a fresh random one.
func handleLabPage(l labAPI, shell pageShell) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := readParams(c, fieldLab, fieldLimit, fieldWindow, fieldTraffic)
		if err != nil {
			return err
		}
		if _, ok := p.values["lab"]; !ok {
			p.values["lab"] = "lab-" + uuid.NewString()[:8]
		}
		lab := p.lab()
		limit := p.integer("limit", labDefaultLimit, 1, labMaxLimit)
		window := p.integer("window", labDefaultWindowS, labMinWindowMs/1000, labMaxWindowMs/1000)
		traffic, ok := p.values["traffic"]
		if !ok {
			traffic = labDefaultTraffic
		} else if !slices.ContainsFunc(views.LabTraffic, func(t struct{ Value, Label string }) bool { return t.Value == traffic }) {
			p.fail("traffic", "must be steady, burst, boundary or random")
		}
		if err := p.problem(); err != nil {
			return err
		}
		return render(c, views.Lab(views.LabPage{
			Lab: lab, Limit: limit, WindowS: window, Traffic: traffic, NameMax: labMaxName,
			Keys:   redisdata.StateKey(labKey(lab), labPolicy, "…"),
			TickMs: shell.tickMs, Instance: shell.instance, AssetVersion: shell.instance,
			Facts: pageFacts, TokenRequired: l.auth.labLocked(),
		}))
	}
}
