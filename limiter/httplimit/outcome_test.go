package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/limiter/httplimit/echolimit"
)

// logins is a login handler: the password "right" logs in, any other
// answers 401. It counts the requests that reached it.
type logins struct{ ok, failed atomic.Int64 }

func (l *logins) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("password") == "right" {
		l.ok.Add(1)
		io.WriteString(w, "welcome")
		return
	}
	l.failed.Add(1)
	http.Error(w, "wrong password", http.StatusUnauthorized)
}

// refunds counts what a Hooks.Refund saw.
type refunds struct {
	mu       sync.Mutex
	ok, errs int
	was      map[int]int // Was → how many refunds found that many entries
	last     limiter.Adjustment
	lastErr  error
}

func (r *refunds) hook(a limiter.Adjustment, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.lastErr = a, err
	if err != nil {
		r.errs++
		return
	}
	r.ok++
	if r.was == nil {
		r.was = map[int]int{}
	}
	r.was[a.Was]++
}

func (r *refunds) counts() (ok, errs int, was map[int]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok, r.errs, maps(r.was)
}

func maps(m map[int]int) map[int]int {
	out := map[int]int{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// twoInstances serves h under p at /0 and /1, through two middlewares on
// two limiters with their own connection pools (one batching, one not), as
// two instances of a service would, every request in the window of key and
// counted only when it answers 401. It returns the server's URL and a
// limiter to read the window with.
func twoInstances(t *testing.T, p limiter.Policy, key string, h http.Handler, seen *refunds) (string, *limiter.Limiter) {
	t.Helper()
	url := redistest.URL(t)
	byKey := httplimit.WithKey(func(*http.Request) (string, error) { return key, nil })
	mux := http.NewServeMux()
	for i, lim := range []*limiter.Limiter{newLimiter(t, url), newLimiter(t, url, limiter.WithoutBatching())} {
		mw := httplimit.New(lim, httplimit.WithTimeout(generous), byKey, httplimit.WithHooks(httplimit.Hooks{Refund: seen.hook}))
		mux.Handle(fmt.Sprintf("/%d", i), mw.Limit(p, httplimit.CountStatus(http.StatusUnauthorized))(h))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, newLimiter(t, url)
}

// burst starts workers at once, each sending each requests one after the
// other, the i-th of all to url(i), and counts the statuses.
func burst(t *testing.T, workers, each int, url func(i int) string) map[int]int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 3 * generous}
	defer client.CloseIdleConnections()
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for j := range each {
				status := 0
				if resp, err := client.Get(url(w*each + j)); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return statuses
}

func windowCount(t *testing.T, lim *limiter.Limiter, key string, p limiter.Policy) int {
	t.Helper()
	w, err := lim.Window(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	return w.Count
}

// TestCountOnlyFailedLogins: on 5/15m counting only 401s, successful logins
// on two instances never use up the account's room, and then 500 concurrent
// wrong passwords reach the handler exactly 5 times — each holds its room
// from its check on, so none slips past while others are being answered.
func TestCountOnlyFailedLogins(t *testing.T) {
	p := mustPolicy(t, "login=5/15m")
	key := "user:" + uuid.NewString()
	h := &logins{}
	seen := &refunds{}
	url, lim := twoInstances(t, p, key, h, seen)

	for i := range 20 {
		if a := get(t, fmt.Sprintf("%s/%d?password=right", url, i%2)); a.status != 200 || a.body != "welcome" {
			t.Fatalf("successful login %d: %d %s; successes must not count", i+1, a.status, a.body)
		}
	}
	if ok, errs, was := seen.counts(); ok != 20 || errs != 0 || was[1] != 20 {
		t.Fatalf("refunds: %d ok (%v entries found), %d failed; want 20 of one entry each", ok, was, errs)
	}

	statuses := burst(t, 500, 1, func(i int) string { return fmt.Sprintf("%s/%d?password=guess", url, i%2) })
	if statuses[401] != 5 || statuses[429] != 495 || h.failed.Load() != 5 {
		t.Fatalf("500 concurrent failures: statuses %v, the handler saw %d; want exactly 5 × 401 and 495 × 429", statuses, h.failed.Load())
	}
	if n := windowCount(t, lim, key, p); n != 5 {
		t.Fatalf("the log holds %d entries, want the 5 failures", n)
	}
	if a := get(t, url+"/0?password=right"); a.status != 429 {
		t.Fatalf("after 5 failures the right password got %d, want 429: the account is locked out", a.status)
	}
}

// TestCountOnlyMixedOutcomes: 50 clients at once on two instances, each
// sending 8 logins, one in ten of all a failure. While they run, no rule's
// window ever holds more than its limit; after, the log holds exactly the
// failures that reached the handler (every success was refunded, once), and
// the room still free goes to later failures, up to the limit and no
// further.
func TestCountOnlyMixedOutcomes(t *testing.T) {
	const limit = 10
	p := mustPolicy(t, "mixed=10/1m,20/15m")
	key := "user:" + uuid.NewString()
	h := &logins{}
	seen := &refunds{}
	url, lim := twoInstances(t, p, key, h, seen)

	stop := make(chan struct{})
	var over []string
	var reads int
	watched := make(chan struct{})
	go func() { // every rule's window, read over and over while the burst runs
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			w, err := lim.Window(context.Background(), key, p)
			if err != nil {
				over = append(over, err.Error())
				return
			}
			reads++
			for _, r := range w.Rules {
				if r.Count > r.Limit {
					over = append(over, fmt.Sprintf("%d entries in a window of limit %d", r.Count, r.Limit))
				}
			}
		}
	}()
	statuses := burst(t, 50, 8, func(i int) string {
		password := "right"
		if i%10 == 0 {
			password = "guess"
		}
		return fmt.Sprintf("%s/%d?password=%s", url, i%2, password)
	})
	close(stop)
	<-watched
	if len(over) > 0 || reads == 0 {
		t.Fatalf("while the burst ran (%d reads of the window): %v", reads, over)
	}

	failed, ok := int(h.failed.Load()), int(h.ok.Load())
	t.Logf("statuses %v, %d reads of the window during the burst", statuses, reads)
	if failed > limit || ok == 0 || statuses[401] != failed || statuses[200] != ok || statuses[429] != 400-failed-ok {
		t.Fatalf("statuses %v; the handler saw %d failures and %d successes: want at most %d failures and some successes", statuses, failed, ok, limit)
	}
	w, err := lim.Window(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range w.Rules {
		if r.Count != failed {
			t.Fatalf("a window holds %d entries after %d failures and %d successes: every success must be refunded", r.Count, failed, ok)
		}
	}
	if got, errs, was := seen.counts(); got != ok || errs != 0 || was[1] != ok {
		t.Fatalf("refunds: %d ok (%v entries found), %d failed; want one entry back for each of the %d successes", got, was, errs, ok)
	}

	for i := failed; i < limit; i++ {
		if a := get(t, url+"/1?password=guess"); a.status != 401 {
			t.Fatalf("failure %d after the burst: %d, want 401 (room the successes gave back)", i+1, a.status)
		}
	}
	if a := get(t, url+"/0?password=guess"); a.status != 429 {
		t.Fatalf("failure %d: %d, want 429", limit+1, a.status)
	}
}

// TestCountOnlyEcho: the Echo adapter counts what the handler's error
// answers (echo.NewHTTPError(401)), which Echo writes only after its
// middleware returns unless the adapter answers it first; a panic that
// Echo's Recover turns into 500 is refunded like any status that does not
// count.
func TestCountOnlyEcho(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "echologin=5/15m")
	key := "user:" + uuid.NewString()
	mw := httplimit.New(lim, httplimit.WithTimeout(generous),
		httplimit.WithKey(func(*http.Request) (string, error) { return key, nil }))
	e := echo.New()
	e.Logger.SetOutput(io.Discard) // Recover logs each panic with its stack
	e.Use(middleware.Recover())
	limit := echolimit.Echo(mw.Limit(p, httplimit.CountStatus(http.StatusUnauthorized)))
	e.GET("/login", func(c echo.Context) error {
		if c.QueryParam("password") != "right" {
			return echo.NewHTTPError(http.StatusUnauthorized, "wrong password")
		}
		return c.String(http.StatusOK, "welcome")
	}, limit)
	e.GET("/broken", func(echo.Context) error { panic("the handler has a bug") }, limit)
	srv := httptest.NewServer(e)
	defer srv.Close()

	for i := range 10 {
		if a := get(t, srv.URL+"/login?password=right"); a.status != 200 {
			t.Fatalf("successful login %d: %d %s", i+1, a.status, a.body)
		}
		if a := get(t, srv.URL+"/broken"); a.status != 500 {
			t.Fatalf("broken handler %d: %d %s", i+1, a.status, a.body)
		}
	}
	for i := range 5 {
		if a := get(t, srv.URL+"/login?password=guess"); a.status != 401 || a.body != "{\"message\":\"wrong password\"}\n" {
			t.Fatalf("failure %d: %d %q, want Echo's 401 answered once", i+1, a.status, a.body)
		}
	}
	if a := get(t, srv.URL+"/login?password=guess"); a.status != 429 {
		t.Fatalf("the sixth failure: %d %s, want 429", a.status, a.body)
	}
	if n := windowCount(t, lim, key, p); n != 5 {
		t.Fatalf("the log holds %d entries, want the 5 failures", n)
	}
}
