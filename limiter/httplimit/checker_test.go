package httplimit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// TestCheckerPeek: a peek is decided by the limiter without recording, under
// the Checker's timeout and fail mode; observers see it start and finish but
// no decision, since nothing was decided for anyone.
func TestCheckerPeek(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	var started, finished, decided atomic.Int64
	c := &httplimit.Checker{Limiter: lim, Timeout: generous, Observers: []httplimit.Observer{httplimit.Hooks{
		Start:    func() { started.Add(1) },
		Done:     func(string, time.Duration, error) { finished.Add(1) },
		Decision: func(limiter.Decision) { decided.Add(1) },
	}}}
	p := httplimit.Prepare(mustPolicy(t, "peeked=2/1m"))
	key := "peek-" + uuid.NewString()
	ctx := context.Background()
	for i := range 2 {
		res := c.Check(ctx, httplimit.Target{Key: key, Policy: p, Cost: 1, Peek: true})
		if res.Err != nil || !res.Pass || !res.Decision.Peek || res.Decision.Bound().Count != i {
			t.Fatalf("peek %d: %+v", i, res)
		}
		if res := c.Check(ctx, httplimit.Target{Key: key, Policy: p, Cost: 1}); !res.Pass || res.Decision.Bound().Count != i+1 {
			t.Fatalf("check %d after a peek: %+v", i, res)
		}
	}
	if res := c.Check(ctx, httplimit.Target{Key: key, Policy: p, Cost: 1, Peek: true}); res.Pass || res.Decision.RetryAfterMs <= 0 {
		t.Fatalf("peek at a full window: %+v", res)
	}
	if res := c.Check(ctx, httplimit.Target{Key: key, Policy: p, Cost: 0, Peek: true}); !res.Pass {
		t.Fatalf("peek of cost 0: %+v", res)
	}
	if res := c.Check(ctx, httplimit.Target{Key: key, Policy: p, Cost: 0}); !errors.Is(res.Err, limiter.ErrInvalidCost) {
		t.Fatalf("a check of cost 0: %+v", res)
	}
	if started.Load() != 6 || finished.Load() != 6 || decided.Load() != 2 {
		t.Fatalf("observers: %d started, %d finished, %d decided; want 6, 6 and the 2 checks", started.Load(), finished.Load(), decided.Load())
	}
}

// bounds is a Decider that records the bounds each check asks for.
type bounds struct{ got []limiter.Within }

func (b *bounds) AllowWithin(_ context.Context, w limiter.Within, key string, p limiter.Policy, cost int) (limiter.Decision, error) {
	b.got = append(b.got, w)
	return limiter.Decision{Allowed: true, Key: key, Policy: p.Name, Cost: cost, Rules: []limiter.RuleState{{Limit: 1}}}, nil
}

func (b *bounds) PeekWithin(ctx context.Context, w limiter.Within, key string, p limiter.Policy, cost int) (limiter.Decision, error) {
	return b.AllowWithin(ctx, w, key, p, cost)
}

// TestCheckerBounds: the check timeout bounds Redis's round trip; the whole
// check, queueing included, is bounded by the timeout too (an HTTP answer
// comes within it) unless MaxWait allows longer, as the gRPC service does.
func TestCheckerBounds(t *testing.T) {
	p := httplimit.Prepare(mustPolicy(t, "bounded=2/1m"))
	for _, tc := range []struct {
		timeout, maxWait time.Duration
		want             limiter.Within
	}{
		{0, 0, limiter.Within{RoundTrip: httplimit.DefaultTimeout, Total: httplimit.DefaultTimeout}},
		{time.Second, 0, limiter.Within{RoundTrip: time.Second, Total: time.Second}},
		{time.Second, 10 * time.Second, limiter.Within{RoundTrip: time.Second, Total: 10 * time.Second}},
		{time.Second, time.Millisecond, limiter.Within{RoundTrip: time.Second, Total: time.Second}},
	} {
		b := &bounds{}
		c := &httplimit.Checker{Limiter: b, Timeout: tc.timeout, MaxWait: tc.maxWait}
		c.Check(context.Background(), httplimit.Target{Key: "k", Policy: p, Cost: 1})
		c.Check(context.Background(), httplimit.Target{Key: "k", Policy: p, Cost: 1, Peek: true})
		if len(b.got) != 2 || b.got[0] != tc.want || b.got[1] != tc.want {
			t.Errorf("Timeout %v, MaxWait %v: the limiter was asked within %+v, want %+v for a check and a peek", tc.timeout, tc.maxWait, b.got, tc.want)
		}
	}
}
