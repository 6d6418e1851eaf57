// Package naive is the WRONG way to build a rate limiter, kept for the race
// demo only: it checks and then acts in separate round trips, so concurrent
// requests all read the same count before any of them records itself, and
// far more than the limit get through. It never decides a real check; the
// limiter's single Lua script exists because of it.
package naive

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
)

// Limiter checks (ZREMRANGEBYSCORE, ZCARD) and then acts (ZADD) on the same
// sorted set as the limiter's log.
type Limiter struct {
	rdb naiveRediser
}

type naiveRediser interface {
	Time(ctx context.Context) *redis.TimeCmd
	ZRemRangeByScore(ctx context.Context, key, min, max string) *redis.IntCmd
	ZCard(ctx context.Context, key string) *redis.IntCmd
	ZAdd(ctx context.Context, key string, members ...redis.Z) *redis.IntCmd
	PExpire(ctx context.Context, key string, expiration time.Duration) *redis.BoolCmd
}

// New returns the demo's naive limiter over rdb.
func New(rdb redis.UniversalClient) *Limiter { return &Limiter{rdb: rdb} }

// Options shape one naive check.
type Options struct {
	// Think is the application's own latency between its check and its act:
	// the time-of-check/time-of-use window.
	Think time.Duration
	// AfterRead, when set, is called once the count has been read, before the
	// think time; the demo uses it as a barrier so every request reads before
	// any writes, which makes the overshoot certain rather than likely.
	AfterRead func()
}

// Allow checks the policy's tightest window rule (the smallest limit; the
// naive model knows one rule, and no calendar quota) and then, if there was
// room, records the request.
func (n *Limiter) Allow(ctx context.Context, key string, p limiter.Policy, o Options) (bool, error) {
	if err := limiter.ValidateKey(key); err != nil {
		return false, err
	}
	var rule limiter.Rule
	for _, r := range p.Rules {
		if r.Period == "" && (rule.Window == 0 || r.Limit < rule.Limit) {
			rule = r
		}
	}
	if rule.Window == 0 {
		return false, fmt.Errorf("failed to race policy %q: the naive model needs a window rule", p.Name)
	}
	k := redisdata.LogKey(key, p.Name)
	read := func() (int64, int64, error) { // check: three round trips
		now, err := n.rdb.Time(ctx).Result()
		if err != nil {
			return 0, 0, err
		}
		ms := now.UnixMilli()
		if err := n.rdb.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(ms-rule.WindowMs(), 10)).Err(); err != nil {
			return 0, 0, err
		}
		count, err := n.rdb.ZCard(ctx, k).Result()
		return ms, count, err
	}
	ms, count, err := read()
	if o.AfterRead != nil {
		o.AfterRead()
	}
	if err != nil {
		return false, fmt.Errorf("failed to read the count: %w", err)
	}
	if count >= int64(rule.Limit) {
		return false, nil
	}
	if o.Think > 0 {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(o.Think):
		}
	}
	// act: by now the count read above may be long out of date.
	if err := n.rdb.ZAdd(ctx, k, redis.Z{Score: float64(ms), Member: uuid.NewString()}).Err(); err != nil {
		return false, fmt.Errorf("failed to record the request: %w", err)
	}
	if err := n.rdb.PExpire(ctx, k, p.Longest()).Err(); err != nil {
		return false, fmt.Errorf("failed to set the expiry: %w", err)
	}
	return true, nil
}
