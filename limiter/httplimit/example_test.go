package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
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
