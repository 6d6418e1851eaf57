// Package httplimit limits HTTP handlers with ratescope's exact limiter:
// net/http middleware, an Echo adapter, and the pieces every HTTP entry point
// of ratescope shares — who the client is (through trusted proxies), the
// RateLimit headers, the 429 problem document, the fail modes and a hook that
// sees every decision.
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
// page on the same Redis (package livebus).
package httplimit

import (
	"errors"
	"net/http"
	"time"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/livebus"
)

// DefaultTimeout is how long a request waits for Redis unless WithTimeout
// says otherwise.
const DefaultTimeout = 150 * time.Millisecond

// FailMode is what a request gets when Redis cannot decide in time.
type FailMode int

const (
	// FailClosed answers 503 with Retry-After: 1: nothing passes unchecked.
	FailClosed FailMode = iota
	// FailOpen lets the request through, without RateLimit headers.
	FailOpen
)

// Hooks observe every check; any may be nil. They run on the request's
// goroutine, so they must be quick.
type Hooks struct {
	// Start is called just before Redis is asked.
	Start func()
	// Done is called when Redis answered or failed: err is nil when a
	// decision was made, else the fail mode applied.
	Done func(policy string, took time.Duration, err error)
	// Decision is called with every decision made (after Done).
	Decision func(limiter.Decision)
}

// Option configures a Middleware, or one Limit of it.
type Option func(*config)

type config struct {
	key        KeyFunc
	cost       int
	denyStatus int
	failMode   FailMode
	timeout    time.Duration
	hooks      Hooks
	live       *livebus.Publisher
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
func WithFailMode(m FailMode) Option { return func(c *config) { c.failMode = m } }

// WithTimeout bounds how long a request waits for Redis (default
// DefaultTimeout). Build the Redis client with ContextTimeoutEnabled for it
// to bound socket I/O.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithHooks sets the hooks that observe every check, e.g. for metrics.
func WithHooks(h Hooks) Option { return func(c *config) { c.hooks = h } }

// WithOnDecision calls f with every decision: ratescope's server sends them to
// its live view.
func WithOnDecision(f func(limiter.Decision)) Option {
	return func(c *config) { c.hooks.Decision = f }
}

// WithLiveView sends every decision to p, so a ratescope page on the same
// Redis shows this service's traffic live, with p's instance name on each
// decision. Run p alongside the service (go p.Run(ctx); defer p.Close()); it
// publishes only decisions on windows some viewer watches, never blocking a
// request. It adds to WithOnDecision and WithHooks rather than replacing them.
func WithLiveView(p *livebus.Publisher) Option { return func(c *config) { c.live = p } }

// Middleware limits requests with one limiter. Limit gives the net/http
// middleware for a policy; Check is the same decision for handlers that
// answer themselves. It is safe for concurrent use.
type Middleware struct {
	lim *limiter.Limiter
	cfg config
}

// New returns a Middleware deciding with lim.
func New(lim *limiter.Limiter, opts ...Option) *Middleware {
	m := &Middleware{lim: lim, cfg: config{
		key:        ByClientAddr(TrustedProxies{}),
		cost:       1,
		denyStatus: http.StatusTooManyRequests,
		timeout:    DefaultTimeout,
	}}
	for _, o := range opts {
		o(&m.cfg)
	}
	return m
}

// Limit returns middleware that limits every request it wraps under p, a
// policy per route: wrap each route's handler with its own. opts override the
// Middleware's options for this route (e.g. another key or cost).
func (m *Middleware) Limit(p limiter.Policy, opts ...Option) func(http.Handler) http.Handler {
	cfg := m.cfg
	for _, o := range opts {
		o(&cfg)
	}
	mm := &Middleware{lim: m.lim, cfg: cfg}
	pp := Prepare(p)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, err := cfg.key(r)
			if err != nil {
				writeKeyError(w, err)
				return
			}
			if res := mm.Check(w, r, Target{Key: fitKey(key), Policy: pp, Cost: cfg.cost}); res.Pass {
				next.ServeHTTP(w, r)
			}
		})
	}
}

// Target is what one Check decides: whose window, under which policy, at
// what cost, and the status of a denial (0: the Middleware's).
type Target struct {
	Key        string
	Policy     *Policy
	Cost       int
	DenyStatus int
}

// Result is the outcome of one Check.
type Result struct {
	// Decision is Redis's decision, when it made one (Err is nil).
	Decision limiter.Decision
	// Err is why there is no decision: Redis failed or was too slow (the fail
	// mode answered), or the key or cost was invalid (400 was answered).
	Err error
	// Pass reports that the caller should go on and answer: the request was
	// allowed (the RateLimit fields are set; for a shadow policy possibly a
	// would-deny, Decision.WouldDeny) or failed open (Err is set).
	// Otherwise Check has written the whole response.
	Pass bool
}

// Check decides one request and writes what every answer shares: the
// RateLimit fields whenever there is a decision, and the whole response when
// the request must not pass — a denial (the deny status, Retry-After, the
// quota-exceeded problem document), Redis failing with FailClosed (503,
// Retry-After: 1), or an invalid key or cost (400).
func (m *Middleware) Check(w http.ResponseWriter, r *http.Request, t Target) Result {
	if err := validate(t); err != nil {
		return Result{Err: err}.badRequest(w)
	}
	h := &m.cfg.hooks
	if h.Start != nil {
		h.Start()
	}
	start := time.Now()
	d, err := m.lim.AllowWithin(r.Context(), m.cfg.timeout, t.Key, t.Policy.Policy, t.Cost)
	if h.Done != nil {
		h.Done(t.Policy.Name, time.Since(start), err)
	}
	if err != nil {
		if m.cfg.failMode == FailOpen {
			return Result{Err: err, Pass: true}
		}
		writeUnavailable(w)
		return Result{Err: err}
	}
	if h.Decision != nil {
		h.Decision(d)
	}
	if m.cfg.live != nil {
		m.cfg.live.Decision(d)
	}
	SetHeaders(w.Header(), t.Policy, d)
	if !d.Denied() { // allowed, or a shadow policy's would-deny
		return Result{Decision: d, Pass: true}
	}
	status := t.DenyStatus
	if status == 0 {
		status = m.cfg.denyStatus
	}
	writeDenied(w, status, d)
	return Result{Decision: d}
}

// validate refuses what Redis must never be asked: such a request is the
// caller's mistake, not a reason to apply the fail mode.
func validate(t Target) error {
	if err := limiter.ValidateKey(t.Key); err != nil {
		return err
	}
	if t.Cost < 1 || t.Cost > t.Policy.MaxCost() {
		return limiter.ErrInvalidCost
	}
	return nil
}

// badRequest answers 400 naming the key or the cost.
func (res Result) badRequest(w http.ResponseWriter) Result {
	field := "key"
	if errors.Is(res.Err, limiter.ErrInvalidCost) {
		field = "cost"
	}
	p := NewProblem(http.StatusBadRequest, field+": "+res.Err.Error())
	p.Errors = []FieldError{{Field: field, Detail: res.Err.Error()}}
	WriteProblem(w, http.StatusBadRequest, p)
	return res
}
