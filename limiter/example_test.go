package limiter_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
)

// Example shows one decision. With login=5/1m,20/1h, the sixth login attempt
// within a minute is denied, and RetryAfterMs says exactly when to try again.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	lim := limiter.New(rdb)
	policy, err := limiter.ParsePolicy("login=5/1m,20/1h")
	if err != nil {
		panic(err)
	}
	d, err := lim.Allow(context.Background(), "user:42", policy, 1)
	if err != nil {
		fmt.Println("Redis unavailable: apply your fail mode")
		return
	}
	if !d.Allowed {
		fmt.Printf("denied; retry in %d ms\n", d.RetryAfterMs)
		return
	}
	fmt.Printf("allowed: %d of %d used this minute\n", d.Rules[0].Count, d.Rules[0].Limit)
}
