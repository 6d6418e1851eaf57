package embedredis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestKeysNeverExpireEarly: a key with a TTL of d still exists d after it was
// written, whenever it was written and however long the server was idle
// before. The limiter relies on it: a log that expired early would let a
// client in before its exact retry time.
func TestKeysNeverExpireEarly(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	const keys = 25
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	for i := range keys {
		// Idle gaps of 0–240 ms before each write, in a scattered order: a
		// write must not be charged the time before it.
		time.Sleep(time.Duration(i*7%25) * 10 * time.Millisecond)
		key := fmt.Sprintf("k%d", i)
		written := time.Now()
		if err := c.Set(ctx, key, "x", ttl).Err(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for time.Since(written) < ttl {
				n, err := c.Exists(ctx, key).Result()
				if err != nil {
					errs <- err
					return
				}
				// The key was written after `written`, and the server looked
				// before the answer came back: gone with the answer back
				// before the TTL had passed since `written` is early.
				if since := time.Since(written); n == 0 && since < ttl {
					errs <- fmt.Errorf("%s expired %v after it was written, before its TTL of %v", key, since, ttl)
					return
				}
				if n == 0 {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Keys do expire.
	time.Sleep(ttl + 50*time.Millisecond)
	if n, err := c.Exists(ctx, "k0").Result(); err != nil || n != 0 {
		t.Fatalf("k0 still exists long after its TTL: %d %v", n, err)
	}
}
