package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
)

// A policy LIMIT/inflight limits requests in flight: a request takes a
// lease before its work (POST /api/v1/leases) and gives it back after
// (DELETE /api/v1/leases/<id>), renewing it while the work runs long
// (POST /api/v1/leases/<id>/renew). One script run decides each call, so
// the limit holds exactly across instances; a holder that never gives its
// lease back frees the slot when the lease time runs out.

// leaseAPI is what the lease routes use: the policies in force, who may
// take leases, the Checker (its timeout, fail mode and overrides), the
// live view and the lease metrics.
type leaseAPI struct {
	store   *configStore
	auth    authorizer
	checker *httplimit.Checker
	redis   redisCalls
	live    *live.View
	log     *slog.Logger
	metrics *metrics
}

// leaseTarget is one lease call's validated input.
type leaseTarget struct {
	key, id string
	pol     *policyEntry
}

// params reads key and policy as a check does and, for a renew or a
// release, the lease id from the path (400 naming leaseId when malformed);
// then whether the caller may (what a check needs); then whether the
// policy limits requests in flight (409 naming policy).
func (a leaseAPI) params(c echo.Context, withID bool) (leaseTarget, error) {
	p, err := readParams(c, fieldKey, fieldPolicy)
	if err != nil {
		return leaseTarget{}, err
	}
	t := leaseTarget{key: p.key(), pol: p.policy(a.store.load())}
	if withID {
		t.id = c.Param("leaseId")
		if limiter.ValidateLeaseID(t.id) != nil {
			p.fail("leaseId", "%q is not a lease id: send the leaseId an acquired lease answered with, a UUID such as 9b2f1c4e-3a5d-4e6f-8a7b-0c1d2e3f4a5b", truncate(t.id, 60))
		}
	}
	if err := p.problem(); err != nil {
		return leaseTarget{}, err
	}
	if err := a.auth.authorize(c, t.pol.Name, false); err != nil {
		return leaseTarget{}, err
	}
	if !t.pol.InFlight() {
		return leaseTarget{}, notInFlight(t.pol.Policy.Policy)
	}
	return t, nil
}

// notInFlight is the 409 of a lease call on a policy of windows.
func notInFlight(p limiter.Policy) *problem {
	detail := "policy " + p.Name + " limits requests per window, not in flight: check it (POST /api/v1/check); leases need a policy LIMIT/inflight"
	pr := newProblem(http.StatusConflict, detail)
	pr.Errors = []httplimit.FieldError{{Field: "policy", Detail: detail}}
	return pr
}

// failOpenLeaseJSON is an acquire's answer when Redis failed and the fail
// mode is open: go on, holding no lease.
type failOpenLeaseJSON struct {
	LeaseID  *string `json:"leaseId"`
	FailOpen bool    `json:"failOpen"`
	Key      string  `json:"key"`
	Policy   string  `json:"policy"`
}

// leaseEvents are the events ratescope_leases_total counts.
var leaseEvents = []string{live.LeaseAcquired, live.LeaseRefused, live.LeaseRenewed, leaseLost, live.LeaseReleased, live.LeaseExpired}

// leaseSeries starts an inflight policy's lease series at zero.
func (m *metrics) leaseSeries(policy string) {
	for _, e := range leaseEvents {
		m.leases.WithLabelValues(policy, e)
	}
	m.leasesHeld.WithLabelValues(policy)
}

// observe counts and streams what one lease call did.
func (a leaseAPI) observe(kind string, res httplimit.LeaseResult) {
	l, name := res.Lease, res.Policy.Name
	held := a.metrics.leasesHeld.WithLabelValues(name)
	switch kind {
	case live.LeaseAcquired:
		held.Inc()
	case live.LeaseReleased:
		held.Dec()
	}
	if kind != "" {
		a.metrics.leases.WithLabelValues(name, kind).Inc()
	}
	if n := len(l.Expired); n > 0 {
		held.Sub(float64(n))
		a.metrics.leases.WithLabelValues(name, live.LeaseExpired).Add(float64(n))
	}
	if kind == leaseLost { // nothing changed for the page to draw
		kind = ""
	}
	a.live.Lease(kind, l, res.Policy.Lease.Milliseconds())
}

// leaseLost counts a renew that found its lease gone (404).
const leaseLost = "lost"

// call runs one lease call and answers Redis's failure: for an acquire the
// fail mode's answer (fail-open: 200, no lease), else 503 — a renew or a
// release admits nothing, and the lease stands until its expiry.
func (a leaseAPI) call(c echo.Context, t leaseTarget, run func(ctx context.Context, ht httplimit.Target) httplimit.LeaseResult) (httplimit.LeaseResult, error) {
	res := run(c.Request().Context(), httplimit.Target{Key: t.key, Policy: t.pol.Policy})
	switch {
	case errors.Is(res.Err, limiter.ErrNotInFlight): // an override's rules are windows: none can be
		return res, notInFlight(res.Policy.Policy)
	case errors.Is(res.Err, limiter.ErrInvalidLeaseID): // params checked it: never Redis's fault
		return res, badRequest([]httplimit.FieldError{{Field: "leaseId", Detail: res.Err.Error()}})
	case errors.Is(res.Err, limiter.ErrInvalidKey):
		return res, badRequest([]httplimit.FieldError{{Field: "key", Detail: res.Err.Error()}})
	case res.Err != nil:
		return res, a.redis.failed("lease", "failed to run the lease call in Redis")
	}
	return res, nil
}

// handleAcquire takes a lease: POST /api/v1/leases?key=&policy=.
func handleAcquire(a leaseAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := a.params(c, false)
		if err != nil {
			return err
		}
		res, err := a.call(c, t, a.checker.Acquire)
		if res.FailedOpen() {
			a.metrics.failOpen.WithLabelValues(t.pol.Name).Inc()
			return c.JSON(http.StatusOK, failOpenLeaseJSON{FailOpen: true, Key: t.key, Policy: t.pol.Name})
		}
		if err != nil {
			return err
		}
		if !res.Lease.Held {
			a.observe(live.LeaseRefused, res)
			httplimit.WriteLeaseDenied(c.Response(), http.StatusTooManyRequests, res.Lease, res.Policy)
			return nil
		}
		a.observe(live.LeaseAcquired, res)
		return c.JSON(http.StatusOK, httplimit.NewLeaseBody(res.Lease, res.Policy))
	}
}

// handleRenew extends a live lease to now plus the lease time: POST
// /api/v1/leases/<leaseId>/renew?key=&policy=; 404 when it is gone.
func handleRenew(a leaseAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := a.params(c, true)
		if err != nil {
			return err
		}
		res, err := a.call(c, t, func(ctx context.Context, ht httplimit.Target) httplimit.LeaseResult {
			return a.checker.Renew(ctx, ht, t.id)
		})
		if err != nil {
			return err
		}
		if !res.Lease.Held {
			a.observe(leaseLost, res)
			pr := newProblem(http.StatusNotFound, "lease "+t.id+" of key "+t.key+" under policy "+t.pol.Name+
				" is not held: it expired or was released; acquire a new one")
			pr.Errors = []httplimit.FieldError{{Field: "leaseId", Detail: "not held: expired or released"}}
			return pr
		}
		a.observe(live.LeaseRenewed, res)
		return c.JSON(http.StatusOK, httplimit.NewLeaseBody(res.Lease, res.Policy))
	}
}

// handleRelease gives a lease back: DELETE
// /api/v1/leases/<leaseId>?key=&policy=, 204 whether it was held or gone.
func handleRelease(a leaseAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := a.params(c, true)
		if err != nil {
			return err
		}
		res, err := a.call(c, t, func(ctx context.Context, ht httplimit.Target) httplimit.LeaseResult {
			return a.checker.Release(ctx, ht, t.id)
		})
		if err != nil {
			return err
		}
		kind := ""
		if res.Lease.Released {
			kind = live.LeaseReleased
		}
		a.observe(kind, res)
		return c.NoContent(http.StatusNoContent)
	}
}
