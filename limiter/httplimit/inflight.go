package httplimit

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/ratescope/ratescope/limiter"
)

// Limit on an inflight policy (LIMIT/inflight) limits requests in flight
// rather than per window: each request acquires a lease before its handler
// and releases it after — also when the handler panics, the panic going on
// unchanged — so at most LIMIT handlers of a key run at once, across every
// instance. A handler still running past half its lease renews it (a timer,
// stopped when the handler returns), so long work keeps its slot and a
// crashed instance frees it when the lease ends. A request that finds every
// lease held gets 429 (WithDenyStatus) with Retry-After: the time until the
// earliest lease ends, rounded up. Redis failing: the fail mode answers, as
// for checks (fail-open runs the handler holding no lease).

// serveLeased runs next for one request under an inflight policy.
func (c *config) serveLeased(next http.Handler, w http.ResponseWriter, r *http.Request, t Target) {
	res := c.checker.Acquire(r.Context(), t)
	switch {
	case errors.Is(res.Err, limiter.ErrInvalidKey):
		Result{Err: res.Err}.badRequest(w)
		return
	case res.Err != nil && !res.Pass:
		writeUnavailable(w)
		return
	case res.Err != nil: // failed open: no lease to keep
		next.ServeHTTP(w, r)
		return
	case !res.Lease.Held:
		WriteLeaseDenied(w, c.denyStatus, res.Lease, res.Policy)
		return
	}
	t.Policy = res.Policy // an override's, when one applied
	k := c.keep(r.Context(), t, res.Lease)
	defer k.release()
	next.ServeHTTP(w, r)
}

// keeper renews one held lease while its handler runs and releases it
// when the handler is done.
type keeper struct {
	c     *config
	ctx   context.Context // the request's, without its cancellation
	t     Target
	id    string
	lease time.Duration

	mu      sync.Mutex
	timer   *time.Timer
	done    bool
	renewal sync.WaitGroup // a renewal under way
}

// keep starts renewing l at half its lease time.
func (c *config) keep(ctx context.Context, t Target, l limiter.Lease) *keeper {
	k := &keeper{c: c, ctx: context.WithoutCancel(ctx), t: t, id: l.ID, lease: time.Duration(l.ExpiresMs-l.NowMs) * time.Millisecond}
	k.mu.Lock()
	k.timer = time.AfterFunc(k.lease/2, k.renew)
	k.mu.Unlock()
	return k
}

// renew extends the lease and schedules the next renewal at half the new
// lease; a failed renewal (Redis) tries again sooner, while the lease may
// still be live; a lease found gone is not renewed again.
func (k *keeper) renew() {
	k.mu.Lock()
	if k.done {
		k.mu.Unlock()
		return
	}
	k.renewal.Add(1)
	k.mu.Unlock()
	defer k.renewal.Done()
	res := k.c.checker.Renew(k.ctx, k.t, k.id)
	next := k.lease / 2
	switch {
	case res.Err != nil:
		next = k.lease / 8
	case !res.Lease.Held:
		return
	}
	k.mu.Lock()
	if !k.done {
		k.timer.Reset(next)
	}
	k.mu.Unlock()
}

// release stops the renewals, waits for one under way, and gives the
// lease back.
func (k *keeper) release() {
	k.mu.Lock()
	k.done = true
	k.timer.Stop()
	k.mu.Unlock()
	k.renewal.Wait()
	_ = k.c.checker.Release(k.ctx, k.t, k.id)
}
