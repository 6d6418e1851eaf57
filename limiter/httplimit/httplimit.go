// Package httplimit limits HTTP handlers with ratescope's exact limiter:
// net/http middleware, and the pieces every entry point of ratescope shares —
// the check core (Checker: the limiter, a timeout, the fail mode and the
// observers of every check), who the client is (through trusted proxies),
// the RateLimit headers and the 429 problem document.
//
//	mw := httplimit.New(lim, httplimit.WithKey(httplimit.ByClientAddr(trusted)))
//	mux.Handle("POST /login", mw.Limit(login)(loginHandler))
//
// An allowed request reaches the handler with RateLimit-Policy and RateLimit
// set; a denied one gets 429 (or the status chosen with WithDenyStatus),
// Retry-After and a problem document of type quota-exceeded. A shadow policy
// (SPEC §9) never refuses: its would-denies pass like allowed requests, with
// no Retry-After. When Redis cannot decide within the timeout, fail-closed
// answers 503 with Retry-After: 1 and fail-open lets the request through
// without RateLimit headers. WithLiveView shows the decisions on a ratescope
// page on the same Redis (package livebus). CountOnly counts a request only
// when its handler's status says so (failed logins, not logins), exactly
// under any concurrency. WaitUpTo lets a request the rules deny wait for
// the first moment it fits, booked so no later request takes it, instead
// of being denied at once.
package httplimit

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/ratescope/ratescope/limiter"
)

// Option configures a Middleware, or one Limit of it.
type Option func(*config)

type config struct {
	key        KeyFunc
	cost       int
	denyStatus int
	checker    Checker
	// counts decides from the handler's status whether a request counts
	// (CountOnly); nil: every request does.
	counts func(status int) bool
	// wait is how long a request may wait for a slot (WaitUpTo); 0: none.
	wait time.Duration
}

// observe adds o to the Checker's observers, never to a slice another
// config shares.
func (c *config) observe(o Observer) {
	c.checker.Observers = append(slices.Clip(c.checker.Observers), o)
}

// WithKey decides whose window a request counts in; the default is the
// connection's peer, ByClientAddr with no trusted proxies.
func WithKey(f KeyFunc) Option { return func(c *config) { c.key = f } }

// WithCost sets what one request costs (default 1); it must be from 1 to the
// policy's MaxCost (its smallest limit, and at most 1,000 for the log), or
// every request gets 400 naming the cost.
func WithCost(n int) Option { return func(c *config) { c.cost = n } }

// WithDenyStatus sets the status of a denial (default 429). A proxy that
// passes only some statuses on (nginx auth_request: 401 and 403) needs another.
func WithDenyStatus(status int) Option { return func(c *config) { c.denyStatus = status } }

// WithFailMode sets the answer when Redis cannot decide in time (default
// FailClosed).
func WithFailMode(m FailMode) Option { return func(c *config) { c.checker.FailMode = m } }

// WithTimeout bounds how long a request waits for Redis (default
// DefaultTimeout). Build the Redis client with ContextTimeoutEnabled for it
// to bound socket I/O.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.checker.Timeout = d } }

// WithObserver adds o to the observers of every check, e.g. for metrics.
func WithObserver(o Observer) Option { return func(c *config) { c.observe(o) } }

// WithHooks adds h to the observers of every check (WithObserver).
func WithHooks(h Hooks) Option { return WithObserver(h) }

// WithOnDecision calls f with every decision: ratescope's server sends them to
// its live view.
func WithOnDecision(f func(limiter.Decision)) Option { return WithHooks(Hooks{Decision: f}) }

// WithLiveView sends every decision to p, a *livebus.Publisher, so a ratescope page on the same
// Redis shows this service's traffic live, with p's instance name on each
// decision. Run p alongside the service (go p.Run(ctx); defer p.Close()); it
// publishes only decisions on windows some viewer watches, never blocking a
// request. Like every observer, it adds to the others rather than replacing
// them.
func WithLiveView(p LiveView) Option { return WithOnDecision(p.Decision) }

// LiveView is what WithLiveView sends decisions to: a *livebus.Publisher.
type LiveView interface{ Decision(limiter.Decision) }

// Middleware limits requests with one limiter, through a Checker. Limit
// gives the net/http middleware for a policy; Check is the same decision for
// handlers that answer themselves. It is safe for concurrent use.
type Middleware struct {
	cfg config
}

// New returns a Middleware deciding with lim.
func New(lim *limiter.Limiter, opts ...Option) *Middleware {
	return NewMiddleware(&Checker{Limiter: lim}, opts...)
}

// NewMiddleware returns a Middleware deciding through a copy of c: options
// such as WithTimeout change the copy, never c.
func NewMiddleware(c *Checker, opts ...Option) *Middleware {
	m := &Middleware{cfg: config{
		key:        ByClientAddr(TrustedProxies{}),
		cost:       1,
		denyStatus: http.StatusTooManyRequests,
		checker:    *c,
	}}
	for _, o := range opts {
		o(&m.cfg)
	}
	return m
}

// Limit returns middleware that limits every request it wraps under p, a
// policy per route: wrap each route's handler with its own. opts override the
// Middleware's options for this route (e.g. another key or cost). Under an
// inflight policy (LIMIT/inflight) each request holds a lease while its
// handler runs instead (see serveLeased); its cost is ignored.
func (m *Middleware) Limit(p limiter.Policy, opts ...Option) func(http.Handler) http.Handler {
	cfg := m.cfg
	for _, o := range opts {
		o(&cfg)
	}
	mm := &Middleware{cfg: cfg}
	pp := Prepare(p)
	if cfg.counts != nil {
		mustRefund(&cfg.checker, p)
	}
	if cfg.wait != 0 {
		mustWait(&cfg.checker, p, cfg.wait)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, err := cfg.key(r)
			if err != nil {
				writeKeyError(w, err)
				return
			}
			t := Target{Key: fitKey(key), Policy: pp, Cost: cfg.cost, Wait: cfg.wait}
			if p.InFlight() { // leases, not checks: serveLeased
				mm.cfg.serveLeased(next, w, r, t)
				return
			}
			res := mm.Check(w, r, t)
			switch {
			case !res.Pass:
			case res.Err == nil && res.Decision.Booked() && !cfg.holdOrRefund(w, r, res, t.Key):
			case cfg.counts != nil && res.Err == nil && res.Decision.Allowed: // recorded: an outcome may take it back
				mm.cfg.serveCounted(next, w, r, t, res.Decision.ID)
			default:
				next.ServeHTTP(w, r)
			}
		})
	}
}

// Check decides one request through the Middleware's Checker and writes
// what every answer shares (Checker.CheckHTTP); a Target without a
// DenyStatus gets the Middleware's.
func (m *Middleware) Check(w http.ResponseWriter, r *http.Request, t Target) Result {
	if t.DenyStatus == 0 {
		t.DenyStatus = m.cfg.denyStatus
	}
	return m.cfg.checker.CheckHTTP(w, r, t)
}

// CheckHTTP decides t (Check) and writes what every HTTP answer shares: the
// RateLimit fields whenever there is a decision, and the whole response when
// the request must not pass — a denial (t.DenyStatus, default 429;
// Retry-After; the quota-exceeded problem document), Redis failing with
// FailClosed (503, Retry-After: 1), an invalid key, cost or wait (400), a
// wait on a policy of another algorithm than the log (409), or an
// inflight policy, whose requests take leases (409 naming the policy). A
// booked request passes with its RateLimit fields (as at its slot) set;
// holding it until the slot is the caller's (Hold).
func (c *Checker) CheckHTTP(w http.ResponseWriter, r *http.Request, t Target) Result {
	res := c.Check(r.Context(), t)
	switch {
	case errors.Is(res.Err, limiter.ErrInvalidKey), errors.Is(res.Err, limiter.ErrInvalidCost), errors.Is(res.Err, limiter.ErrInvalidWait):
		return res.badRequest(w)
	case errors.Is(res.Err, limiter.ErrWaitNotLog):
		p := NewProblem(http.StatusConflict, "wait: "+res.Err.Error())
		p.Errors = []FieldError{{Field: "wait", Detail: res.Err.Error()}}
		WriteProblem(w, http.StatusConflict, p)
		return res
	case errors.Is(res.Err, limiter.ErrInFlight):
		inFlightProblem(w, res.Policy.Name)
		return res
	case res.Err != nil:
		if !res.Pass {
			writeUnavailable(w)
		}
		return res
	}
	SetHeaders(w.Header(), res.Policy, res.Decision)
	if !res.Pass {
		status := t.DenyStatus
		if status == 0 {
			status = http.StatusTooManyRequests
		}
		var why *Explanation
		if t.Explain {
			e := Explain(res.Decision, res.Policy.Policy)
			why = &e
		}
		writeDenied(w, status, res.Decision, why)
	}
	return res
}

// badRequest answers 400 naming the key, the cost or the wait.
func (res Result) badRequest(w http.ResponseWriter) Result {
	field := "key"
	switch {
	case errors.Is(res.Err, limiter.ErrInvalidCost):
		field = "cost"
	case errors.Is(res.Err, limiter.ErrInvalidWait):
		field = "wait"
	}
	p := NewProblem(http.StatusBadRequest, field+": "+res.Err.Error())
	p.Errors = []FieldError{{Field: field, Detail: res.Err.Error()}}
	WriteProblem(w, http.StatusBadRequest, p)
	return res
}
