package limiter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// resetsChannel names the classic Pub/Sub channel on which Reset announces
// every reset, as "<policy> <key>", so every instance's deny cache forgets
// that window: with the database number added (redisdb.Channel), as Pub/Sub
// spans every database of a Redis and a reset on one must not clear another's
// cache. Classic Pub/Sub reaches every subscriber on a standalone Redis, on
// every node of a cluster and on the embedded Redis alike.
const resetsChannel = "ratescope:limiter:resets"

// How Run watches its subscription: after resetsIdle without a message it
// pings, and a ping unanswered for another resetsIdle means the connection is
// gone (a paused or partitioned Redis) — so a lost subscription stops the
// cache within about a second. Resubscribing backs off from resubscribeMin
// to resubscribeMax.
const (
	resetsIdle     = 500 * time.Millisecond
	resubscribeMin = 100 * time.Millisecond
	resubscribeMax = 2 * time.Second
)

// Reset deletes key's state under p, of every algorithm, with its lock and
// its quotas' counters of the periods around now (the client starts
// afresh), and announces it on its database's resets channel in the same
// round trip, so every
// instance's deny cache forgets the window within the Pub/Sub delay; this
// instance's cache forgets it before Reset returns.
func (l *Limiter) Reset(ctx context.Context, key string, p Policy) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	pipe := l.rdb.Pipeline()
	pipe.Del(ctx, append(allStateKeys(key, p.Name), l.quotaKeys(key, p)...)...)
	pipe.Publish(ctx, l.resets, p.Name+" "+key)
	_, err := pipe.Exec(ctx)
	if l.cache != nil {
		// Even after an error: the delete may have happened.
		l.cache.invalidate(cacheKey{key: key, policy: p.Name})
	}
	if err != nil {
		return fmt.Errorf("failed to reset the window: %w", err)
	}
	return nil
}

// Run keeps the local deny cache in step with resets made by any instance:
// it subscribes to its database's resets channel and drops each announced window. The cache
// stores and answers only while that subscription is up; when it is lost the
// cache empties and stops, and when it is back (Run resubscribes by itself,
// backing off) the cache starts empty, as resets may have been missed
// meanwhile. Without Run, the cache never answers.
//
// Run returns nil when ctx ends, at once when the cache is off, and an error
// if this Limiter's Run is already running.
func (l *Limiter) Run(ctx context.Context) error {
	if l.cache == nil {
		return nil
	}
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("failed to run: this Limiter's Run is already running")
	}
	defer l.running.Store(false)
	wait := resubscribeMin
	for {
		up, _ := l.followResets(ctx)
		l.cache.setServing(false)
		if ctx.Err() != nil {
			return nil
		}
		if up {
			wait = resubscribeMin
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, resubscribeMax)
	}
}

// followResets holds one subscription until it fails or ctx ends; up reports
// whether it was ever confirmed.
func (l *Limiter) followResets(ctx context.Context) (up bool, err error) {
	ps := l.rdb.Subscribe(ctx, l.resets)
	defer ps.Close()
	// A blocked receive does not watch ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, resetsIdle)
		if ctx.Err() != nil {
			return up, ctx.Err()
		}
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() && !pinged {
			pctx, cancel := context.WithTimeout(ctx, resetsIdle)
			err = ps.Ping(pctx)
			cancel()
			pinged = true
			if err == nil {
				continue
			}
		}
		if err != nil {
			return up, fmt.Errorf("failed to follow resets: %w", err)
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" && !up {
				l.cache.setServing(true)
				up = true
			}
		case *redis.Message:
			if policy, key, ok := strings.Cut(m.Payload, " "); ok {
				l.cache.invalidate(cacheKey{key: key, policy: policy})
			}
		}
	}
}
