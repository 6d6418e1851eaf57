package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// Example shows decisions under login=5/1m,20/1h: five login attempts within a
// minute pass, the sixth is denied by the one-minute rule, and RetryAfterMs
// says exactly when to try again (when the first attempt leaves the minute).
func Example() {
	// In a service: redis.NewClient(&redis.Options{Addr: "localhost:6379"}).
	rdb := exampleRedis()
	defer rdb.Close()
	lim := limiter.New(rdb)
	policy, err := limiter.ParsePolicy("login=5/1m,20/1h")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	// A clean slate for the example; Reset is also how an admin unblocks a client.
	if err := lim.Reset(ctx, "user:42", policy); err != nil {
		panic(err)
	}
	var first limiter.Decision
	for attempt := 1; attempt <= 6; attempt++ {
		d, err := lim.Allow(ctx, "user:42", policy, 1)
		if err != nil {
			fmt.Println("Redis unavailable: apply your fail mode")
			return
		}
		if attempt == 1 {
			first = d
		}
		if d.Allowed {
			fmt.Printf("attempt %d: allowed, %d of %d this minute\n", attempt, d.Rules[0].Count, d.Rules[0].Limit)
			continue
		}
		// The wait ends when attempt 1 leaves the minute: RetryAfterMs is
		// counted from this decision's clock, NowMs.
		retryAt := time.Duration(d.NowMs+d.RetryAfterMs-first.NowMs) * time.Millisecond
		bound := d.Bound()
		fmt.Printf("attempt %d: denied by %d/%v; retry at attempt 1 + %v\n", attempt, bound.Limit, time.Duration(bound.WindowMs)*time.Millisecond, retryAt)
	}
	// Output:
	// attempt 1: allowed, 1 of 5 this minute
	// attempt 2: allowed, 2 of 5 this minute
	// attempt 3: allowed, 3 of 5 this minute
	// attempt 4: allowed, 4 of 5 this minute
	// attempt 5: allowed, 5 of 5 this minute
	// attempt 6: denied by 5/1m0s; retry at attempt 1 + 1m0s
}

// exampleRedis is the Redis the example talks to when it runs as a test: the
// tests' own (a redis-server when installed, else the embedded one).
func exampleRedis() *redis.Client {
	url, err := redistest.Shared()
	if err != nil {
		panic(err)
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		panic(err)
	}
	return redis.NewClient(opt)
}
