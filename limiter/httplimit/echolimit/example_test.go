package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/limiter/httplimit/echolimit"
)

// Example limits an Echo route to 2 requests a minute per client address
// with httplimit's middleware: the third gets 429.
func Example() {
	mr, _ := miniredis.Run() // an in-process Redis for the example; use your own
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})

	search, _ := limiter.ParsePolicy("search=2/1m")
	mw := httplimit.New(limiter.New(rdb),
		// The in-process Redis runs its scripts in an interpreter: give it
		// longer than the 150 ms a real Redis is allowed by default.
		httplimit.WithTimeout(time.Second))
	e := echo.New()
	e.GET("/search", func(c echo.Context) error { return c.String(http.StatusOK, "results") },
		echolimit.Echo(mw.Limit(search)))

	for range 3 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest("GET", "/search", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "search";r=1;t=60
	// 200 "search";r=0;t=60
	// 429 "search";r=0;t=60
}
