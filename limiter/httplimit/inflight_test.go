package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// byHeader keys requests by their X-Key header.
func byHeader(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }

func serveKey(h http.Handler, key string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-Key", key)
	h.ServeHTTP(rec, req)
	return rec
}

// TestInFlightMiddleware: under 2/inflight, two handlers run at once and a
// third request gets 429 with Retry-After and the problem document while
// they do; once they return, their leases are released at once.
func TestInFlightMiddleware(t *testing.T) {
	lim := newLimiter(t, redistest.RealURL(t))
	p := mustPolicy(t, "jobs=2/inflight+lease=1m")
	key := t.Name()
	entered, leave := make(chan struct{}), make(chan struct{})
	h := httplimit.New(lim, httplimit.WithKey(byHeader)).Limit(p)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-leave
	}))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if rec := serveKey(h, key); rec.Code != http.StatusOK {
				t.Errorf("a holder got %d", rec.Code)
			}
		})
		<-entered
	}
	rec := serveKey(h, key)
	var body httplimit.LeaseDeniedBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusTooManyRequests ||
		rec.Header().Get("Retry-After") != "60" || body.InFlight != 2 || body.Limit != 2 || body.RetryAfterMs <= 59_000 || body.Type != httplimit.QuotaExceeded {
		t.Fatalf("a third request: %d %v %s (%v)", rec.Code, rec.Header(), rec.Body, err)
	}
	close(leave)
	wg.Wait()
	w, err := lim.Window(context.Background(), key, p)
	if err != nil || w.Count != 0 {
		t.Fatalf("after the handlers returned: %d leases live (%v), want 0", w.Count, err)
	}
}

// TestInFlightMiddlewarePanicReleases: a handler that panics releases its
// lease as the panic passes through, and the panic goes on unchanged.
func TestInFlightMiddlewarePanicReleases(t *testing.T) {
	lim := newLimiter(t, redistest.RealURL(t))
	p := mustPolicy(t, "jobs=1/inflight+lease=1m")
	bug := errors.New("the handler has a bug")
	h := httplimit.New(lim, httplimit.WithKey(httplimit.ByClientAddr(httplimit.TrustedProxies{}))).Limit(p)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(bug)
	}))
	for i := range 3 { // each request finds the slot free again
		if _, got := serveRecovering(h); got != bug {
			t.Fatalf("request %d: the panic that came out: %v", i, got)
		}
	}
	if w, err := lim.Window(context.Background(), "192.0.2.1", p); err != nil || w.Count != 0 {
		t.Fatalf("after panics: %d leases live (%v), want 0", w.Count, err)
	}
}

// TestInFlightMiddlewareRenews: a handler running for 2.5 lease times of 1s
// keeps its slot — a request meanwhile is refused — and no goroutine of
// the renewals outlives the request.
func TestInFlightMiddlewareRenews(t *testing.T) {
	url := redistest.RealURL(t)
	lim := newLimiter(t, url)
	baseline := goleak.IgnoreCurrent()
	p := mustPolicy(t, "slow=1/inflight+lease=1s")
	key := t.Name()
	entered := make(chan struct{})
	h := httplimit.New(lim, httplimit.WithKey(byHeader)).Limit(p)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		time.Sleep(2500 * time.Millisecond)
	}))
	done := make(chan int)
	go func() { done <- serveKey(h, key).Code }()
	<-entered
	deadline := time.Now().Add(2 * time.Second)
	refused := 0
	for time.Now().Before(deadline) {
		l, err := lim.Acquire(context.Background(), key, p)
		if err != nil {
			t.Fatal(err)
		}
		if l.Held {
			t.Fatalf("a second lease was granted while the slow handler ran: its lease was not renewed (%+v)", l)
		}
		refused++
		time.Sleep(100 * time.Millisecond)
	}
	if code := <-done; code != http.StatusOK || refused == 0 {
		t.Fatalf("the slow request: %d, %d refused meanwhile", code, refused)
	}
	if l, err := lim.Acquire(context.Background(), key, p); err != nil || !l.Held {
		t.Fatalf("after the slow handler returned: %+v, %v", l, err)
	}
	goleak.VerifyNone(t, baseline, goleak.IgnoreAnyFunction("github.com/ratescope/ratescope/internal/redistest.(*Process).launch.func1"))
}

// TestInFlightCheckRefused: a check of an inflight policy is answered 409
// naming the policy, without asking Redis or the fail mode.
func TestInFlightCheckRefused(t *testing.T) {
	lim := newLimiter(t, redistest.RealURL(t))
	p := mustPolicy(t, "jobs=1/inflight")
	c := &httplimit.Checker{Limiter: lim, FailMode: httplimit.FailOpen}
	rec := httptest.NewRecorder()
	res := c.CheckHTTP(rec, httptest.NewRequest("GET", "/", nil), httplimit.Target{Key: "k", Policy: httplimit.Prepare(p), Cost: 1})
	var body httplimit.Problem
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if res.Pass || !errors.Is(res.Err, limiter.ErrInFlight) || rec.Code != http.StatusConflict || len(body.Errors) != 1 || body.Errors[0].Field != "policy" {
		t.Fatalf("check of an inflight policy: %+v; %d %s", res, rec.Code, rec.Body)
	}
}
