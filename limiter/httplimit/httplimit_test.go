package httplimit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/limiter/httplimit/echolimit"
)

// generous bounds Redis calls on a loaded machine: these tests are about
// decisions, not latency.
const generous = 10 * time.Second

func newLimiter(t testing.TB, url string, opts ...limiter.Option) *limiter.Limiter {
	t.Helper()
	ro, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	ro.ContextTimeoutEnabled = true
	ro.PoolSize = 64
	c := redis.NewClient(ro)
	t.Cleanup(func() { c.Close() })
	return limiter.New(c, opts...)
}

func mustPolicy(t testing.TB, s string) limiter.Policy {
	t.Helper()
	p, err := limiter.ParsePolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// backend counts the requests that got through.
type backend struct{ n atomic.Int64 }

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.n.Add(1)
	io.WriteString(w, "backend")
}

type answer struct {
	status int
	header http.Header
	body   string
}

func get(t testing.TB, url string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// TestExactUnderConcurrency is the limiter's promise kept through HTTP: 500
// concurrent requests against a limit of 37 reach the handlers exactly 37
// times, through net/http and through the Echo adapter, each run on a fresh
// key. As in the limiter's test, the requests alternate between two
// middlewares on two limiters with their own connection pools (as two
// services would be): one batching checks into pipelines, one sending each alone.
func TestExactUnderConcurrency(t *testing.T) {
	url := redistest.URL(t)
	p := mustPolicy(t, "burst=37/1m")
	var key atomic.Value
	byRun := httplimit.WithKey(func(*http.Request) (string, error) { return key.Load().(string), nil })
	mws := []*httplimit.Middleware{
		httplimit.New(newLimiter(t, url), httplimit.WithTimeout(generous), byRun),
		httplimit.New(newLimiter(t, url, limiter.WithoutBatching()), httplimit.WithTimeout(generous), byRun),
	}

	stdlib := &backend{}
	mux := http.NewServeMux()
	echoed := &backend{}
	e := echo.New()
	for i, mw := range mws {
		path := fmt.Sprintf("/limited/%d", i)
		mux.Handle(path, mw.Limit(p)(stdlib))
		e.GET(path, echo.WrapHandler(echoed), echolimit.Echo(mw.Limit(p)))
	}

	for _, tc := range []struct {
		name    string
		handler http.Handler
		backend *backend
	}{{"net/http", mux, stdlib}, {"echo", e, echoed}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 500}, Timeout: 3 * generous}
			defer client.CloseIdleConnections()
			for run := range 3 {
				key.Store("exact-" + uuid.NewString())
				tc.backend.n.Store(0)
				statuses := map[int]int{}
				var mu sync.Mutex
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range 500 {
					wg.Go(func() {
						<-start
						status := 0
						if resp, err := client.Get(fmt.Sprintf("%s/limited/%d", srv.URL, i%2)); err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							status = resp.StatusCode
						}
						mu.Lock()
						statuses[status]++
						mu.Unlock()
					})
				}
				close(start)
				wg.Wait()
				if statuses[200] != 37 || statuses[429] != 463 || tc.backend.n.Load() != 37 {
					t.Fatalf("run %d: statuses %v, backend reached %d times; want exactly 37 × 200 and 463 × 429", run, statuses, tc.backend.n.Load())
				}
			}
		})
	}
}

// TestAnswers checks what a client sees: the same headers, problem document
// and Retry-After as the check API, and the deny status a route chooses.
func TestAnswers(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	key := "answers-" + uuid.NewString()
	var decisions []limiter.Decision
	var mu sync.Mutex
	mw := httplimit.New(lim, httplimit.WithTimeout(generous),
		httplimit.WithKey(func(*http.Request) (string, error) { return key, nil }),
		httplimit.WithOnDecision(func(d limiter.Decision) { mu.Lock(); decisions = append(decisions, d); mu.Unlock() }))
	b := &backend{}
	mux := http.NewServeMux()
	mux.Handle("/one", mw.Limit(mustPolicy(t, "one=2/10s"))(b))
	mux.Handle("/two", mw.Limit(mustPolicy(t, "two=1/1s,3/1m"), httplimit.WithDenyStatus(403))(b))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for i := 1; i <= 2; i++ {
		a := get(t, srv.URL+"/one")
		if a.status != 200 || a.body != "backend" || a.header.Get("Retry-After") != "" {
			t.Fatalf("request %d: %d %v %s", i, a.status, a.header, a.body)
		}
		if got := a.header.Get("RateLimit-Policy"); got != `"one";q=2;w=10` {
			t.Fatalf("RateLimit-Policy = %q", got)
		}
		if got, want := a.header.Get("RateLimit"), fmt.Sprintf(`"one";r=%d;t=10`, 2-i); got != want {
			t.Fatalf("RateLimit = %q, want %q", got, want)
		}
	}
	a := get(t, srv.URL+"/one")
	if a.status != 429 || a.header.Get("Content-Type") != "application/problem+json" || a.header.Get("Retry-After") != "10" {
		t.Fatalf("third: %d %v %s", a.status, a.header, a.body)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(a.body), &doc); err != nil {
		t.Fatal(err)
	}
	retry := int64(doc["retryAfterMs"].(float64))
	if doc["type"] != httplimit.QuotaExceeded || doc["status"] != 429.0 || doc["allowed"] != false ||
		doc["key"] != key || doc["policy"] != "one" || doc["count"] != 2.0 || doc["limit"] != 2.0 ||
		doc["remaining"] != 0.0 || doc["windowMs"] != 10000.0 || doc["id"] != nil || retry <= 0 || retry > 10000 ||
		int64(doc["oldestMs"].(float64))+10000-int64(doc["nowMs"].(float64)) != retry {
		t.Fatalf("problem document %s", a.body)
	}
	if vp := doc["violated-policies"].([]any); len(vp) != 1 || vp[0] != "one" {
		t.Fatalf("violated-policies %v", vp)
	}
	if got, want := a.header.Get("RateLimit"), `"one";r=0;t=`+a.header.Get("Retry-After"); got != want {
		t.Fatalf("RateLimit on the denial = %q, want %q", got, want)
	}
	if b.n.Load() != 2 {
		t.Fatalf("backend reached %d times, want 2", b.n.Load())
	}

	// A second route, its own policy and deny status; multi-rule item names.
	if a := get(t, srv.URL+"/two"); a.status != 200 || a.header.Get("RateLimit-Policy") != `"two/1";q=1;w=1, "two/60";q=3;w=60` {
		t.Fatalf("two: %d %v", a.status, a.header)
	}
	a = get(t, srv.URL+"/two")
	if a.status != 403 || a.header.Get("Retry-After") != "1" || !strings.Contains(a.body, `"violated-policies":["two/1"]`) || !strings.Contains(a.body, `"status":403`) {
		t.Fatalf("two, denied: %d %v %s", a.status, a.header, a.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(decisions) != 5 || !decisions[0].Allowed || decisions[2].Allowed || decisions[4].Policy != "two" {
		t.Fatalf("the hook saw %d decisions: %+v", len(decisions), decisions)
	}
}

// TestKeys limits clients apart: by address behind a trusted proxy (a
// spoofed leftmost X-Forwarded-For changes nothing), by header (missing: 400
// naming it), and any value a key function returns is made a valid key.
func TestKeys(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	trusted, _ := httplimit.ParseTrustedProxies([]string{"127.0.0.1"})
	suffix := uuid.NewString()[:8] // a fresh policy name: fresh windows on a shared Redis
	p := mustPolicy(t, "k"+suffix+"=1/1m")
	mw := httplimit.New(lim, httplimit.WithTimeout(generous))
	b := &backend{}
	mux := http.NewServeMux()
	mux.Handle("/ip", mw.Limit(p, httplimit.WithKey(httplimit.ByClientAddr(trusted)))(b))
	mux.Handle("/header", mw.Limit(p, httplimit.WithKey(httplimit.ByHeader("X-Api-Key")))(b))
	mux.Handle("/custom", mw.Limit(p, httplimit.WithKey(func(r *http.Request) (string, error) {
		return r.URL.Query().Get("who"), nil
	}))(b))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	xff := "X-Forwarded-For"
	if a := get(t, srv.URL+"/ip", xff, "203.0.113.1"); a.status != 200 {
		t.Fatalf("first client: %d", a.status)
	}
	if a := get(t, srv.URL+"/ip", xff, "203.0.113.2"); a.status != 200 {
		t.Fatalf("second client is limited with the first: %d", a.status)
	}
	if a := get(t, srv.URL+"/ip", xff, "198.51.100.9, 203.0.113.1"); a.status != 429 || !strings.Contains(a.body, `"key":"203.0.113.1"`) {
		t.Fatalf("a spoofed leftmost value escaped the limit: %d %s", a.status, a.body)
	}

	if a := get(t, srv.URL+"/header"); a.status != 400 || !strings.Contains(a.body, `"field":"header:X-Api-Key"`) {
		t.Fatalf("missing header: %d %s", a.status, a.body)
	}
	if a := get(t, srv.URL+"/header", "X-Api-Key", "key with spaces"); a.status != 200 {
		t.Fatalf("header: %d %s", a.status, a.body)
	}
	if a := get(t, srv.URL+"/header", "X-Api-Key", "key with spaces"); a.status != 429 || !strings.Contains(a.body, `"key":"sha256:`) {
		t.Fatalf("header, again: %d %s", a.status, a.body)
	}
	long := strings.Repeat("x", 200)
	if a := get(t, srv.URL+"/custom?who="+long); a.status != 200 {
		t.Fatalf("custom: %d %s", a.status, a.body)
	}
	if a := get(t, srv.URL+"/custom?who="+long); a.status != 429 || !strings.Contains(a.body, `"key":"sha256:`) {
		t.Fatalf("custom, again: %d %s", a.status, a.body)
	}
	if b.n.Load() != 4 {
		t.Fatalf("backend reached %d times, want 4", b.n.Load())
	}
}

// TestFailModes points the middleware at a port where no Redis listens:
// closed answers 503 with Retry-After: 1, open lets the request through
// without RateLimit fields; both within the timeout.
func TestFailModes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens here now
	lim := newLimiter(t, "redis://"+addr+"/0")
	p := mustPolicy(t, "down=5/1m")
	for _, tc := range []struct {
		mode   httplimit.FailMode
		status int
	}{{httplimit.FailClosed, 503}, {httplimit.FailOpen, 200}} {
		var errs atomic.Int64
		mw := httplimit.New(lim, httplimit.WithFailMode(tc.mode), httplimit.WithTimeout(200*time.Millisecond),
			httplimit.WithHooks(httplimit.Hooks{Done: func(_ string, _ time.Duration, err error) {
				if err != nil {
					errs.Add(1)
				}
			}}))
		b := &backend{}
		srv := httptest.NewServer(mw.Limit(p)(b))
		start := time.Now()
		a := get(t, srv.URL)
		took := time.Since(start)
		srv.Close()
		if a.status != tc.status || a.header.Get("RateLimit") != "" || a.header.Get("RateLimit-Policy") != "" || took > 3*time.Second {
			t.Fatalf("mode %s: %d %v %s in %v", tc.mode, a.status, a.header, a.body, took)
		}
		switch tc.mode {
		case httplimit.FailClosed:
			if a.header.Get("Retry-After") != "1" || a.header.Get("Content-Type") != "application/problem+json" || b.n.Load() != 0 {
				t.Fatalf("closed: %v %s, backend %d", a.header, a.body, b.n.Load())
			}
		case httplimit.FailOpen:
			if a.body != "backend" || a.header.Get("Retry-After") != "" {
				t.Fatalf("open: %v %s", a.header, a.body)
			}
		}
		if errs.Load() != 1 {
			t.Fatalf("Done hook saw %d errors, want 1", errs.Load())
		}
	}
}

// TestInvalidCost is the caller's mistake, answered 400 without asking Redis.
func TestInvalidCost(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	mw := httplimit.New(lim, httplimit.WithCost(3))
	srv := httptest.NewServer(mw.Limit(mustPolicy(t, "small=2/1m"))(&backend{}))
	defer srv.Close()
	if a := get(t, srv.URL); a.status != 400 || !strings.Contains(a.body, `"field":"cost"`) {
		t.Fatalf("%d %s", a.status, a.body)
	}
	// One log check adds at most 1,000 entries, whatever the limit; the
	// other algorithms keep a few numbers whatever the cost.
	for _, tc := range []struct {
		policy string
		cost   int
		status int
	}{
		{"big=100000/10s", 1001, 400},
		{"big=100000/10s", 1000, 200},
		{"big=100000/10s@gcra", 1001, 200},
	} {
		mw := httplimit.New(lim, httplimit.WithCost(tc.cost), httplimit.WithTimeout(generous),
			httplimit.WithKey(func(*http.Request) (string, error) { return uuid.NewString(), nil }))
		srv := httptest.NewServer(mw.Limit(mustPolicy(t, tc.policy))(&backend{}))
		a := get(t, srv.URL)
		srv.Close()
		if a.status != tc.status || (tc.status == 400 && !strings.Contains(a.body, `"field":"cost"`)) {
			t.Errorf("%s, cost %d: %d %s, want %d", tc.policy, tc.cost, a.status, a.body, tc.status)
		}
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	for ms, want := range map[int64]string{0: "0", 1: "1", 999: "1", 1000: "1", 1001: "2", 59_999: "60"} {
		if got := httplimit.RetryAfter(ms); got != want {
			t.Errorf("RetryAfter(%d) = %q, want %q", ms, got, want)
		}
	}
}
