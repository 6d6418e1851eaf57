package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/livebus"
)

// Example limits a login handler to 3 attempts a minute per client address.
// The fourth attempt gets 429 with Retry-After; every answer carries the
// RateLimit fields.
func Example() {
	mr, _ := miniredis.Run() // an in-process Redis for the example; use your own
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})

	login, _ := limiter.ParsePolicy("login=3/1m")
	mw := httplimit.New(limiter.New(rdb),
		// The in-process Redis runs its scripts in an interpreter: give it
		// longer than the 150 ms a real Redis is allowed by default.
		httplimit.WithTimeout(time.Second))
	mux := http.NewServeMux()
	mux.Handle("POST /login", mw.Limit(login)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "welcome")
	})))

	for range 4 {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("POST", "/login", nil))
		if rec.Code == http.StatusOK {
			fmt.Println(rec.Code, rec.Body.String(), rec.Header().Get("RateLimit"))
			continue
		}
		fmt.Println(rec.Code, rec.Header().Get("Content-Type"), rec.Header().Get("RateLimit"),
			"Retry-After:", rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 welcome "login";r=2;t=60
	// 200 welcome "login";r=1;t=60
	// 200 welcome "login";r=0;t=60
	// 429 application/problem+json "login";r=0;t=60 Retry-After: 60
}

// ExampleCountStatus limits failed logins, not logins: five wrong passwords
// for an account within 15 minutes lock it out, while its owner logs in as
// often as they like. Every attempt is checked before the password is, so it
// holds its room while the handler runs (500 concurrent guesses get exactly
// five tries); a login that does not answer 401 gives its room back: each
// success sees r=4, as if it were the first attempt.
func ExampleCountStatus() {
	mr, _ := miniredis.Run() // an in-process Redis for the example; use your own
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})

	login, _ := limiter.ParsePolicy("login=5/15m")
	mw := httplimit.New(limiter.New(rdb),
		httplimit.WithTimeout(time.Second), // the in-process Redis is slower than a real one
		httplimit.WithKey(func(r *http.Request) (string, error) { return "user:" + r.FormValue("user"), nil }))
	mux := http.NewServeMux()
	mux.Handle("POST /login", mw.Limit(login, httplimit.CountStatus(http.StatusUnauthorized))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.FormValue("password") != "correct horse" {
				http.Error(w, "wrong password", http.StatusUnauthorized)
				return
			}
			io.WriteString(w, "welcome")
		})))

	attempt := func(password string) {
		form := url.Values{"user": {"alice"}, "password": {password}}
		req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code == http.StatusTooManyRequests {
			fmt.Println(rec.Code, rec.Header().Get("RateLimit"), "Retry-After:", rec.Header().Get("Retry-After"))
			return
		}
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"), strings.TrimSpace(rec.Body.String()))
	}
	for range 3 {
		attempt("correct horse")
	}
	for range 6 {
		attempt("guess")
	}
	attempt("correct horse") // locked out until the failures slide out
	// Output:
	// 200 "login";r=4;t=900 welcome
	// 200 "login";r=4;t=900 welcome
	// 200 "login";r=4;t=900 welcome
	// 401 "login";r=4;t=900 wrong password
	// 401 "login";r=3;t=900 wrong password
	// 401 "login";r=2;t=900 wrong password
	// 401 "login";r=1;t=900 wrong password
	// 401 "login";r=0;t=900 wrong password
	// 429 "login";r=0;t=900 Retry-After: 900
	// 429 "login";r=0;t=900 Retry-After: 900
}

// ExampleWithLiveView shows a service's traffic on a ratescope page on the
// same Redis: open /?policy=login&key=<client address> there and each
// decision appears as it is made, from instance "api-1". A decision on a
// window nobody watches — here, every one — costs a map lookup and
// publishes nothing.
func ExampleWithLiveView() {
	mr, _ := miniredis.Run() // an in-process Redis for the example; use your own
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	pub := livebus.NewPublisher(rdb, "api-1")
	go pub.Run(context.Background())
	defer pub.Close()

	login, _ := limiter.ParsePolicy("login=5/1m")
	mw := httplimit.New(limiter.New(rdb),
		// The in-process Redis runs its scripts in an interpreter: give it
		// longer than the 150 ms a real Redis is allowed by default.
		httplimit.WithTimeout(time.Second),
		httplimit.WithLiveView(pub))
	mux := http.NewServeMux()
	mux.Handle("POST /login", mw.Limit(login)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "welcome")
	})))

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("POST", "/login", nil))
	fmt.Println(rec.Code, rec.Body.String(), rec.Header().Get("RateLimit"))
	fmt.Printf("%+v\n", pub.Stats())
	// Output:
	// 200 welcome "login";r=4;t=60
	// {Published:0 Dropped:0 Failed:0}
}

// ExampleChecker decides outside HTTP — a gRPC service, a queue consumer —
// with the same timeout, fail mode and observers as the middleware, and the
// RateLimit field values as strings for whatever carries them.
func ExampleChecker() {
	mr, _ := miniredis.Run() // an in-process Redis for the example; use your own
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})

	checker := &httplimit.Checker{
		Limiter:  limiter.New(rdb),
		FailMode: httplimit.FailOpen,
		Observers: []httplimit.Observer{httplimit.Hooks{
			Decision: func(d limiter.Decision) { fmt.Print("observed ", d.Key, ": ") },
		}},
	}
	api, _ := limiter.ParsePolicy("api=2/10s,3/1m")
	p := httplimit.Prepare(api)
	for range 3 {
		res := checker.Check(context.Background(), httplimit.Target{Key: "tenant-7", Policy: p, Cost: 1})
		rateLimit, rateLimitPolicy := p.Fields(res.Decision)
		fmt.Println(res.Pass, rateLimit, "|", rateLimitPolicy)
	}
	// Output:
	// observed tenant-7: true "api/10";r=1;t=10, "api/60";r=2;t=60 | "api/10";q=2;w=10, "api/60";q=3;w=60
	// observed tenant-7: true "api/10";r=0;t=10, "api/60";r=1;t=60 | "api/10";q=2;w=10, "api/60";q=3;w=60
	// observed tenant-7: false "api/10";r=0;t=10, "api/60";r=1;t=60 | "api/10";q=2;w=10, "api/60";q=3;w=60
}
