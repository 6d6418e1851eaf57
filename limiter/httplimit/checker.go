package httplimit

import (
	"context"
	"time"

	"github.com/ratescope/ratescope/limiter"
)

// DefaultTimeout is how long a check waits for Redis unless the Checker (or
// WithTimeout) says otherwise.
const DefaultTimeout = 150 * time.Millisecond

// FailMode is what a check gets when Redis cannot decide in time. The zero
// value is FailClosed.
type FailMode string

const (
	// FailClosed refuses: the HTTP answer is 503 with Retry-After: 1, so
	// nothing passes unchecked.
	FailClosed FailMode = "closed"
	// FailOpen lets the request through, without RateLimit headers.
	FailOpen FailMode = "open"
)

// Decider decides one request, as *limiter.Limiter does: within w when it
// needs Redis. PeekWithin decides it without recording it.
type Decider interface {
	AllowWithin(ctx context.Context, w limiter.Within, key string, p limiter.Policy, cost int) (limiter.Decision, error)
	PeekWithin(ctx context.Context, w limiter.Within, key string, p limiter.Policy, cost int) (limiter.Decision, error)
}

// Target is what one check decides: whose window, under which policy, at
// what cost, and (for HTTP answers) the status of a denial (0: 429, or the
// Middleware's WithDenyStatus).
type Target struct {
	Key        string
	Policy     *Policy
	Cost       int
	DenyStatus int
	// Peek decides without recording (limiter.Limiter.Peek): the answer
	// to "would it pass?". Cost may be 0 then. Observers see a peek start
	// and finish, but it is no decision: Decided is not called.
	Peek bool
	// Wait lets a request the log's rules deny book the first moment its
	// cost fits, when that is at most Wait away (limiter.Within.Wait, up
	// to limiter.MaxWait): the Decision is then allowed and Booked, and
	// the caller holds the request until its slot (Hold), or refunds it
	// when it gives up. 0: no booking. A wait on another algorithm than
	// the log is the caller's mistake (limiter.ErrWaitNotLog).
	Wait time.Duration
	// Explain asks CheckHTTP to add the decision's explanation (Explain)
	// to a denial's problem document; the caller adds it to an allowed
	// answer it writes itself.
	Explain bool
}

// Result is the outcome of one check.
type Result struct {
	// Decision is Redis's decision, when it made one (Err is nil).
	Decision limiter.Decision
	// Policy is what the check was decided under: the Target's policy, or
	// the override of it that Checker.Resolve chose for the key. Its
	// RateLimit fields are the answer's.
	Policy *Policy
	// Err is why there is no decision: Redis failed or was too slow (the
	// fail mode answered), or the key, cost or wait was invalid
	// (limiter.ErrInvalidKey, limiter.ErrInvalidCost,
	// limiter.ErrInvalidWait, limiter.ErrWaitNotLog: the caller's mistake),
	// or the policy limits requests in flight (limiter.ErrInFlight: its
	// requests take leases, Checker.Acquire).
	Err error
	// Pass reports that the request may go on: it was allowed (for a shadow
	// policy possibly a would-deny, Decision.WouldDeny) or failed open (Err
	// is set).
	Pass bool
}

// FailedOpen reports a check that passed only because Redis failed and the
// fail mode is open.
func (r Result) FailedOpen() bool { return r.Pass && r.Err != nil }

// Observer sees every check a Checker makes that reaches the limiter, on the
// check's goroutine, so its methods must be quick. An invalid key or cost is
// refused before any observer hears of it.
type Observer interface {
	// Started is called just before the limiter is asked.
	Started(t Target)
	// Finished is called when the limiter answered or failed, with the
	// check's result: res.Err is nil when a decision was made, else Redis
	// failed or was too slow and the fail mode answered (res.FailedOpen).
	Finished(t Target, res Result, took time.Duration)
	// Decided is called with every decision made, after Finished.
	Decided(d limiter.Decision)
}

// Hooks is an Observer made of functions; any may be nil.
type Hooks struct {
	// Start is called just before Redis is asked.
	Start func()
	// Done is called when Redis answered or failed: err is nil when a
	// decision was made, else the fail mode applied.
	Done func(policy string, took time.Duration, err error)
	// Decision is called with every decision made (after Done).
	Decision func(limiter.Decision)
	// Refund is called after every refund (CountOnly, Checker.Refund):
	// err is nil when Redis took back a.Was entries, else they stay.
	Refund func(a limiter.Adjustment, err error)
}

// Started calls h.Start.
func (h Hooks) Started(Target) {
	if h.Start != nil {
		h.Start()
	}
}

// Finished calls h.Done.
func (h Hooks) Finished(t Target, res Result, took time.Duration) {
	if h.Done != nil {
		h.Done(t.Policy.Name, took, res.Err)
	}
}

// Decided calls h.Decision.
func (h Hooks) Decided(d limiter.Decision) {
	if h.Decision != nil {
		h.Decision(d)
	}
}

// Checker is the one place a check is decided, whichever door it came in
// by (net/http middleware, a handler that answers itself, a gRPC service):
// it bounds the limiter call by Timeout, applies FailMode when Redis fails,
// and tells the Observers — the Checker's, then the policy's (Prepare). Its
// fields are read, never written, by Check: set them before the first check.
type Checker struct {
	Limiter Decider
	// Timeout bounds how long a check waits for Redis's answer, counted
	// from when the check is sent to Redis; 0 means DefaultTimeout. Build
	// the Redis client with ContextTimeoutEnabled for it to bound socket I/O.
	Timeout time.Duration
	// MaxWait bounds a whole check, time queued before it is sent to Redis
	// included (limiter.Within.Total); 0 means Timeout: the answer comes
	// within the check timeout, as an HTTP check's must. A larger MaxWait
	// lets a saturated but healthy setup slow down instead of failing
	// checks that Redis answers in time.
	MaxWait   time.Duration
	FailMode  FailMode
	Observers []Observer
	// Resolve, when set, gives the policy that decides key's checks in
	// place of p: one client's own rules, or those of every key with a
	// prefix (ratescope's overrides), made with p.WithRules so the name,
	// algorithm, shadow, lock and observers stay p's. It returns p itself
	// when nothing overrides it, and runs on every check: it must be quick
	// and safe for concurrent use. The decision carries the override's name
	// (limiter.Decision.Override). A Target whose policy is already an
	// override's (Policy.Override) is decided as it is.
	Resolve func(key string, p *Policy) *Policy
}

// PolicyFor is the policy that decides key's checks under p: Resolve's
// choice, or p. A handler that must know it before the check — to bound a
// cost by the rules in force — asks here and puts it in the Target.
func (c *Checker) PolicyFor(key string, p *Policy) *Policy {
	if c.Resolve == nil || p.override != "" {
		return p
	}
	return c.Resolve(key, p)
}

// Check decides t. A key or cost the limiter would refuse is the caller's
// mistake, reported in Result.Err without asking Redis or applying the fail
// mode; so is an inflight policy (limiter.ErrInFlight).
//
// Under an override (Resolve) the override's rules decide, the cost is
// bounded by them, and the observers see the Target with the override's
// policy.
func (c *Checker) Check(ctx context.Context, t Target) Result {
	if err := limiter.ValidateKey(t.Key); err != nil {
		return Result{Err: err, Policy: t.Policy}
	}
	t.Policy = c.PolicyFor(t.Key, t.Policy)
	if t.Policy.InFlight() { // its requests take leases (Acquire)
		return Result{Err: limiter.ErrInFlight, Policy: t.Policy}
	}
	if !t.Policy.CostFits(t.Cost) && !(t.Peek && t.Cost == 0) {
		return Result{Err: limiter.ErrInvalidCost, Policy: t.Policy}
	}
	if t.Wait != 0 {
		if err := limiter.ValidateWait(t.Wait, t.Policy.Policy); err != nil {
			return Result{Err: err, Policy: t.Policy}
		}
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	within := limiter.Within{RoundTrip: timeout, Total: max(c.MaxWait, timeout), Wait: t.Wait}
	observers := [2][]Observer{c.Observers, t.Policy.observers}
	for _, os := range observers {
		for _, o := range os {
			o.Started(t)
		}
	}
	start := time.Now()
	var d limiter.Decision
	var err error
	if t.Peek {
		d, err = c.Limiter.PeekWithin(ctx, within, t.Key, t.Policy.Policy, t.Cost)
	} else {
		d, err = c.Limiter.AllowWithin(ctx, within, t.Key, t.Policy.Policy, t.Cost)
	}
	took := time.Since(start)
	d.Override = t.Policy.override // a cached denial too: the cache keys by policy name
	res := Result{Decision: d, Err: err, Pass: err == nil && !d.Denied(), Policy: t.Policy}
	if err != nil {
		res.Decision, res.Pass = limiter.Decision{}, c.FailMode == FailOpen
	}
	for _, os := range observers {
		for _, o := range os {
			o.Finished(t, res, took)
		}
	}
	if err == nil && !t.Peek {
		for _, os := range observers {
			for _, o := range os {
				o.Decided(d)
			}
		}
	}
	return res
}
