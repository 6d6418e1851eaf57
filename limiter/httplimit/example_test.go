package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

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
	mw := httplimit.New(limiter.New(rdb))
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

// ExampleWithLiveView shows a service's traffic on a ratescope page on the
// same Redis: open /?policy=login&key=<client address> and each decision
// appears as it is made, from instance "api-1". A decision on a window nobody
// watches costs a map lookup and publishes nothing.
func ExampleWithLiveView() {
	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
	pub := livebus.NewPublisher(rdb, "api-1")
	go pub.Run(context.Background())
	defer pub.Close()

	login, _ := limiter.ParsePolicy("login=5/1m")
	mw := httplimit.New(limiter.New(rdb), httplimit.WithLiveView(pub))
	mux := http.NewServeMux()
	mux.Handle("POST /login", mw.Limit(login)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "welcome")
	})))
	_ = http.ListenAndServe(":8080", mux)
}
