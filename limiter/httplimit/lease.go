package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ratescope/ratescope/limiter"
)

// Leaser takes, extends and gives back leases of an inflight policy
// (LIMIT/inflight), as *limiter.Limiter does.
type Leaser interface {
	Acquire(ctx context.Context, key string, p limiter.Policy) (limiter.Lease, error)
	Renew(ctx context.Context, key string, p limiter.Policy, id string) (limiter.Lease, error)
	Release(ctx context.Context, key string, p limiter.Policy, id string) (limiter.Lease, error)
}

// LeaseResult is the outcome of one lease call through a Checker.
type LeaseResult struct {
	// Lease is Redis's answer, when it gave one (Err is nil).
	Lease limiter.Lease
	// Policy is what the call was made under: the Target's policy or the
	// override of it for the key (Checker.Resolve).
	Policy *Policy
	// Err is why there is no answer: Redis failed or was too slow, or the
	// input was the caller's mistake (limiter.ErrInvalidKey,
	// limiter.ErrInvalidLeaseID, limiter.ErrNotInFlight).
	Err error
	// Pass reports, for an acquire, that the request may go on: a lease is
	// held, or Redis failed and the fail mode is open (Err set, no lease).
	Pass bool
}

// FailedOpen reports an acquire that passed only because Redis failed and
// the fail mode is open: no lease is held.
func (r LeaseResult) FailedOpen() bool { return r.Pass && r.Err != nil }

// Acquire takes a lease for t.Key under t.Policy (an inflight policy, or
// the override Resolve chooses for the key), bounded by the Timeout like a
// check, with the fail mode applied when Redis fails.
func (c *Checker) Acquire(ctx context.Context, t Target) LeaseResult {
	res := c.leaseCall(ctx, t, func(ctx context.Context, l Leaser, p limiter.Policy) (limiter.Lease, error) {
		return l.Acquire(ctx, t.Key, p)
	})
	res.Pass = res.Err == nil && res.Lease.Held
	if res.Err != nil && !isCallerError(res.Err) {
		res.Pass = c.FailMode == FailOpen
	}
	return res
}

// Renew extends the lease id to the policy's lease time from now; not Held
// when it is gone (expired or released).
func (c *Checker) Renew(ctx context.Context, t Target, id string) LeaseResult {
	return c.leaseCall(ctx, t, func(ctx context.Context, l Leaser, p limiter.Policy) (limiter.Lease, error) {
		return l.Renew(ctx, t.Key, p, id)
	})
}

// Release gives the lease id back; idempotent.
func (c *Checker) Release(ctx context.Context, t Target, id string) LeaseResult {
	return c.leaseCall(ctx, t, func(ctx context.Context, l Leaser, p limiter.Policy) (limiter.Lease, error) {
		return l.Release(ctx, t.Key, p, id)
	})
}

func (c *Checker) leaseCall(ctx context.Context, t Target, call func(context.Context, Leaser, limiter.Policy) (limiter.Lease, error)) LeaseResult {
	if err := limiter.ValidateKey(t.Key); err != nil {
		return LeaseResult{Err: err, Policy: t.Policy}
	}
	t.Policy = c.PolicyFor(t.Key, t.Policy)
	l, ok := c.Limiter.(Leaser)
	if !ok {
		return LeaseResult{Err: fmt.Errorf("failed to take a lease: %T keeps no leases (no Acquire method)", c.Limiter), Policy: t.Policy}
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, max(c.MaxWait, timeout))
	defer cancel()
	lease, err := call(ctx, l, t.Policy.Policy)
	return LeaseResult{Lease: lease, Err: err, Policy: t.Policy}
}

// isCallerError reports input the limiter refused before asking Redis.
func isCallerError(err error) bool {
	for _, e := range []error{limiter.ErrInvalidKey, limiter.ErrInvalidLeaseID, limiter.ErrNotInFlight, limiter.ErrInFlight} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// LeaseBody is a held lease as the lease API answers it: the new or
// renewed lease's id and expiry, and how many of the limit are in flight.
type LeaseBody struct {
	LeaseID   string `json:"leaseId"`
	Key       string `json:"key"`
	Policy    string `json:"policy"`
	InFlight  int    `json:"inFlight"`
	Limit     int    `json:"limit"`
	ExpiresMs int64  `json:"expiresMs"`
	NowMs     int64  `json:"nowMs"`
	// Override names the per-client override whose limit applied.
	Override string `json:"override,omitempty"`
}

// NewLeaseBody is the answer to a held lease l under p.
func NewLeaseBody(l limiter.Lease, p *Policy) LeaseBody {
	return LeaseBody{
		LeaseID: l.ID, Key: l.Key, Policy: l.Policy, InFlight: l.InFlight, Limit: l.Limit,
		ExpiresMs: l.ExpiresMs, NowMs: l.NowMs, Override: p.Override(),
	}
}

// LeaseDeniedBody is the problem document of a refused acquire: every
// lease is held, and RetryAfterMs is the time until the earliest ends (an
// upper bound: its holder may release it sooner).
type LeaseDeniedBody struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
	Key              string   `json:"key"`
	Policy           string   `json:"policy"`
	InFlight         int      `json:"inFlight"`
	Limit            int      `json:"limit"`
	NowMs            int64    `json:"nowMs"`
	RetryAfterMs     int64    `json:"retryAfterMs"`
	Override         string   `json:"override,omitempty"`
}

// WriteLeaseDenied answers a refused acquire l under p with status (429
// unless a Middleware says otherwise): Retry-After rounded up to whole
// seconds and the quota-exceeded problem document.
func WriteLeaseDenied(w http.ResponseWriter, status int, l limiter.Lease, p *Policy) {
	w.Header().Set("Retry-After", RetryAfter(l.RetryAfterMs))
	WriteProblem(w, status, LeaseDeniedBody{
		Type:   QuotaExceeded,
		Title:  "Request cannot be satisfied as assigned quota has been exceeded",
		Status: status,
		Detail: "policy " + strconv.Quote(l.Policy) + " has all " + strconv.Itoa(l.Limit) +
			" leases in flight; the earliest ends in " + strconv.FormatInt(l.RetryAfterMs, 10) + " ms unless released sooner",
		ViolatedPolicies: []string{l.Policy},
		Key:              l.Key, Policy: l.Policy, InFlight: l.InFlight, Limit: l.Limit,
		NowMs: l.NowMs, RetryAfterMs: l.RetryAfterMs, Override: p.Override(),
	})
}

// inFlightProblem is the 409 of a check on a policy that limits requests in
// flight: its requests take leases.
func inFlightProblem(w http.ResponseWriter, policy string) {
	detail := "policy " + strconv.Quote(policy) + " limits requests in flight: take a lease (POST /api/v1/leases) instead of checking"
	p := NewProblem(http.StatusConflict, detail)
	p.Errors = []FieldError{{Field: "policy", Detail: detail}}
	WriteProblem(w, http.StatusConflict, p)
}
