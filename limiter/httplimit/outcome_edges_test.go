package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// serveRecovering serves one request and returns what a panic carried out
// of h, if one did.
func serveRecovering(h http.Handler) (rec *httptest.ResponseRecorder, panicked any) {
	rec = httptest.NewRecorder()
	defer func() { panicked = recover() }()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	return rec, nil
}

// TestCountOnlyPanickingHandler: a handler that panics answered 500 unless
// it wrote a status first; that status decides, the refund is made, and the
// panic goes on with its own value.
func TestCountOnlyPanickingHandler(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "panics=5/15m")
	bug := errors.New("the handler has a bug")
	for _, tc := range []struct {
		name    string
		counts  httplimit.Option
		handler http.HandlerFunc
		kept    int
	}{
		{"500 does not count", httplimit.CountStatus(401),
			func(http.ResponseWriter, *http.Request) { panic(bug) }, 0},
		{"500 counts", httplimit.CountOnly(func(status int) bool { return status >= 500 }),
			func(http.ResponseWriter, *http.Request) { panic(bug) }, 1},
		{"wrote 401, then panicked", httplimit.CountStatus(401),
			func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(401); panic(bug) }, 1},
		{"wrote 200, then panicked", httplimit.CountStatus(401),
			func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "half"); panic(bug) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "panics-" + uuid.NewString()
			seen := &refunds{}
			mw := httplimit.New(lim, httplimit.WithTimeout(generous),
				httplimit.WithKey(func(*http.Request) (string, error) { return key, nil }),
				httplimit.WithHooks(httplimit.Hooks{Refund: seen.hook}))
			_, panicked := serveRecovering(mw.Limit(p, tc.counts)(tc.handler))
			if panicked != bug {
				t.Fatalf("the panic that left the middleware carried %v, want the handler's own", panicked)
			}
			if n := windowCount(t, lim, key, p); n != tc.kept {
				t.Fatalf("the log holds %d entries, want %d", n, tc.kept)
			}
			if ok, errs, was := seen.counts(); ok != 1-tc.kept || errs != 0 || was[1] != 1-tc.kept {
				t.Fatalf("refunds: %d ok (%v entries found), %d failed; want %d", ok, was, errs, 1-tc.kept)
			}
		})
	}
}

// TestCountOnlyRefundFailsQuietly: Redis stops answering while the handler
// runs; the refund fails within the timeout, the response is the
// handler's, untouched, and the Refund hook hears of the failure.
func TestCountOnlyRefundFailsQuietly(t *testing.T) {
	proxy := redistest.StartProxy(t, redistest.URL(t))
	defer proxy.Resume() // before the proxy closes: nothing waits on held bytes
	lim := newLimiter(t, proxy.URL)
	seen := &refunds{}
	mw := httplimit.New(lim, httplimit.WithTimeout(2*time.Second),
		httplimit.WithHooks(httplimit.Hooks{Refund: seen.hook}))
	p := mustPolicy(t, "quiet=5/15m")
	srv := httptest.NewServer(mw.Limit(p, httplimit.CountStatus(401))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy.Pause() // Redis is gone until the test ends
		w.Header().Set("X-Handler", "yes")
		io.WriteString(w, "welcome")
	})))
	defer srv.Close()

	a := get(t, srv.URL)
	if a.status != 200 || a.body != "welcome" || a.header.Get("X-Handler") != "yes" || a.header.Get("RateLimit") == "" {
		t.Fatalf("%d %v %q; want the handler's 200 with the RateLimit fields of the check", a.status, a.header, a.body)
	}
	ok, errs, _ := seen.counts()
	seen.mu.Lock()
	last, lastErr := seen.last, seen.lastErr
	seen.mu.Unlock()
	if ok != 0 || errs != 1 || !errors.Is(lastErr, context.DeadlineExceeded) || last.Policy != "quiet" || last.Key == "" || len(last.ID) != 36 {
		t.Fatalf("refunds: %d ok, %d failed, the last %+v: %v; want one failure past the deadline, naming the check", ok, errs, last, lastErr)
	}
}

// TestCountOnlyNothingRecorded: a shadow policy's would-deny and a check
// that failed open recorded nothing, so nothing is refunded; an allowed
// shadow decision was recorded and is refunded like any other.
func TestCountOnlyNothingRecorded(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "shadowed=1/1m+shadow")
	key := "shadow-" + uuid.NewString()
	seen := &refunds{}
	h := &logins{}
	mw := httplimit.New(lim, httplimit.WithTimeout(generous),
		httplimit.WithKey(func(r *http.Request) (string, error) { return key + r.URL.Query().Get("k"), nil }),
		httplimit.WithHooks(httplimit.Hooks{Refund: seen.hook}))
	srv := httptest.NewServer(mw.Limit(p, httplimit.CountStatus(401))(h))
	defer srv.Close()

	if a := get(t, srv.URL+"?password=guess"); a.status != 401 {
		t.Fatalf("failure: %d", a.status)
	}
	for range 2 { // would-denies: they pass, recording nothing
		if a := get(t, srv.URL+"?password=right"); a.status != 200 {
			t.Fatalf("would-deny: %d", a.status)
		}
	}
	if ok, errs, _ := seen.counts(); ok != 0 || errs != 0 {
		t.Fatalf("%d refunds, %d failed, for checks that recorded nothing", ok, errs)
	}
	if a := get(t, srv.URL+"?password=right&k=2"); a.status != 200 {
		t.Fatalf("allowed: %d", a.status)
	}
	if ok, errs, was := seen.counts(); ok != 1 || errs != 0 || was[1] != 1 {
		t.Fatalf("refunds: %d ok (%v entries found), %d failed; want the allowed shadow decision's", ok, was, errs)
	}
	if n := windowCount(t, lim, key, p); n != 1 {
		t.Fatalf("the log holds %d entries, want the failure's", n)
	}

	// No Redis at all, failing open: nothing was checked, nothing to refund.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	down := httplimit.New(newLimiter(t, "redis://"+addr+"/0"), httplimit.WithFailMode(httplimit.FailOpen),
		httplimit.WithTimeout(200*time.Millisecond), httplimit.WithHooks(httplimit.Hooks{Refund: seen.hook}))
	srv2 := httptest.NewServer(down.Limit(p, httplimit.CountStatus(401))(h))
	defer srv2.Close()
	if a := get(t, srv2.URL+"?password=right"); a.status != 200 {
		t.Fatalf("failing open: %d", a.status)
	}
	if ok, errs, _ := seen.counts(); ok != 1 || errs != 0 {
		t.Fatalf("%d refunds, %d failed, after a check that failed open; want none more", ok, errs)
	}
}

// TestCountOnlyNeedsALogPolicy: only the log keeps each check's entries, so
// counting outcomes on another algorithm, or through a Limiter that cannot
// refund, is refused when the route is built.
func TestCountOnlyNeedsALogPolicy(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	mustPanic := func(name, want string, build func()) {
		t.Helper()
		defer func() {
			if msg, _ := recover().(string); !strings.Contains(msg, want) {
				t.Errorf("%s: the panic says %q, want it to contain %q", name, msg, want)
			}
		}()
		build()
	}
	gcra := mustPolicy(t, "smooth=5/1m@gcra")
	mustPanic("gcra", `policy "smooth" of algorithm gcra`, func() {
		httplimit.New(lim).Limit(gcra, httplimit.CountStatus(401))
	})
	mustPanic("gcra, for the whole middleware", "algorithm log", func() {
		httplimit.New(lim, httplimit.CountStatus(401)).Limit(gcra)
	})
	mustPanic("no refunds", "cannot refund", func() {
		httplimit.NewMiddleware(&httplimit.Checker{Limiter: &bounds{}}, httplimit.CountStatus(401)).Limit(mustPolicy(t, "plain=5/1m"))
	})
	// CountOnly(nil) counts every request: any algorithm will do.
	httplimit.New(lim, httplimit.CountStatus(401)).Limit(gcra, httplimit.CountOnly(nil))
}

// TestCountOnlyWriter: the status comes through the writer the handler
// gets, which still flushes, hijacks and reaches http.ResponseController's
// other features; an informational 103 is not the status.
func TestCountOnlyWriter(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "writer=5/15m")
	suffix := uuid.NewString()
	refunded := make(chan string, 3)
	mw := httplimit.New(lim, httplimit.WithTimeout(generous),
		httplimit.WithKey(func(r *http.Request) (string, error) { return r.URL.Path[1:] + suffix, nil }),
		httplimit.WithHooks(httplimit.Hooks{Refund: func(a limiter.Adjustment, err error) { refunded <- a.Key }}))
	var problems []string
	mux := http.NewServeMux()
	mux.HandleFunc("/flush", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
		f, ok := w.(http.Flusher)
		if !ok {
			problems = append(problems, "no http.Flusher")
		} else {
			f.Flush()
		}
		if err := http.NewResponseController(w).Flush(); err != nil {
			problems = append(problems, "ResponseController.Flush: "+err.Error())
		}
		if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			problems = append(problems, "ResponseController.SetWriteDeadline: "+err.Error())
		}
	})
	mux.HandleFunc("/early-hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(401)
	})
	mux.HandleFunc("/hijack", func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			problems = append(problems, "no http.Hijacker")
			return
		}
		conn, rw, err := hj.Hijack()
		if err != nil {
			problems = append(problems, "Hijack: "+err.Error())
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		rw.Flush()
	})
	srv := httptest.NewServer(mw.Limit(p, httplimit.CountStatus(401))(mux))
	defer srv.Close()

	for _, tc := range []struct {
		path   string
		status int
		kept   int
	}{{"/flush", 401, 1}, {"/early-hints", 401, 1}, {"/hijack", 200, 0}} {
		if a := get(t, srv.URL+tc.path); a.status != tc.status {
			t.Errorf("%s: %d %q, want %d", tc.path, a.status, a.body, tc.status)
		}
		if tc.kept == 0 { // the hijacked connection's client may read its answer before the refund
			select {
			case <-refunded:
			case <-time.After(generous):
				t.Fatalf("%s: no refund", tc.path)
			}
		}
		if n := windowCount(t, lim, tc.path[1:]+suffix, p); n != tc.kept {
			t.Errorf("%s: the log holds %d entries, want %d", tc.path, n, tc.kept)
		}
	}
	if len(problems) > 0 {
		t.Fatalf("the handlers' writer: %v", problems)
	}
}
