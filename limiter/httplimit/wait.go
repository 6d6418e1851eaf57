package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ratescope/ratescope/limiter"
)

// WaitUpTo makes a request the log's rules deny wait up to d for a slot
// instead of being denied at once (Target.Wait): when its cost fits within
// d, its check books that moment — recorded now at that future score, so
// no request arriving later takes it — and the request sleeps until then
// (Hold), then reaches the handler. A retry beyond d is denied at once,
// nothing booked. d is at most limiter.MaxWait; 0 turns waiting off.
//
// While a request waits it holds its goroutine and connection, and nothing
// else: a timer, no polling. When its context ends first (the client hung
// up, a deadline) the booking is refunded (Checker.Refund, also when the
// client is gone) and the handler never runs; the request is answered 503
// "ended before its slot". A refund frees room for a new request: those
// already waiting keep the later slots they booked.
//
// Only a log policy can book: Limit panics for a policy of another
// algorithm, for d outside 0 to limiter.MaxWait, or for a Checker whose
// Limiter is no Refunder — mistakes found when the routes are built.
func WaitUpTo(d time.Duration) Option {
	return func(c *config) { c.wait = d }
}

// mustWait panics unless requests under p may wait up to d through c.
func mustWait(c *Checker, p limiter.Policy, d time.Duration) {
	if err := limiter.ValidateWait(d, p); err != nil {
		panic(fmt.Sprintf("httplimit: WaitUpTo(%v) on policy %q: %v", d, p.Name, err))
	}
	if _, ok := c.Limiter.(Refunder); !ok {
		panic(fmt.Sprintf("httplimit: WaitUpTo on policy %q: the Checker's Limiter %T cannot refund a booking (no Refund method)", p.Name, c.Limiter))
	}
}

// Hold blocks until the slot d booked comes, or ctx ends first (then it
// returns ctx's error): it waits d.WaitMs from when it is called, so call
// it as soon as the check answers — Redis booked the slot WaitMs after its
// own clock read, before the answer arrived, so the request is never let
// through early. It returns at once for a decision that booked nothing,
// and reports how long it held. A timer and a select: it costs a goroutine
// that sleeps, nothing more.
func Hold(ctx context.Context, d limiter.Decision) (time.Duration, error) {
	if !d.Booked() {
		return 0, nil
	}
	start := time.Now()
	t := time.NewTimer(time.Duration(d.WaitMs()) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return time.Since(start), nil
	case <-ctx.Done():
		return time.Since(start), ctx.Err()
	}
}

// holdOrRefund holds a booked request until its slot (Hold) and reports
// whether it may go on; when its context ends first it refunds the
// booking, answers 503, and reports false.
func (c *config) holdOrRefund(w http.ResponseWriter, r *http.Request, res Result, key string) bool {
	if _, err := Hold(r.Context(), res.Decision); err == nil {
		return true
	}
	t := Target{Key: key, Policy: res.Policy}
	_, _ = c.checker.Refund(context.WithoutCancel(r.Context()), t, res.Decision.ID)
	WriteProblem(w, http.StatusServiceUnavailable,
		NewProblem(http.StatusServiceUnavailable, "the request ended before its booked slot; the booking was refunded"))
	return false
}
