package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
)

// env is what every phase gets: the options, the Redis to use, a folder for
// the child processes' logs, and where the report goes.
type env struct {
	o        options
	redisURL string
	redis    *redistest.Process // nil with --redis-url
	dir      string
	rep      *report
}

// redisClient is a client of the run's Redis configured as the server
// configures its own (context timeouts, no retries), with pool connections.
func (e *env) redisClient(pool int) (*redis.Client, error) {
	opt, err := redis.ParseURL(e.redisURL)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the Redis URL: %w", err)
	}
	opt.ContextTimeoutEnabled, opt.MaxRetries, opt.PoolSize = true, -1, pool
	return redis.NewClient(opt), nil
}

// phaseRedis is the Redis a phase measures on and a client of it (pool
// connections): a redis-server of the phase's own, started empty in a folder
// named for it, unless --redis-url gave one; note says which, for the report.
// done stops what it started.
func (e *env) phaseRedis(ctx context.Context, name string, pool int) (rdb *redis.Client, note string, done func(), err error) {
	url, note := e.redisURL, fmt.Sprintf("the Redis given with --redis-url (%s): its figures include whatever else it served meanwhile", e.redisURL)
	stop := func() {}
	if e.o.redisURL == "" {
		dir := filepath.Join(e.dir, "redis-"+name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, "", nil, fmt.Errorf("failed to create a folder for redis-server: %w", err)
		}
		rs, err := redistest.Launch(ctx, dir)
		if err != nil {
			return nil, "", nil, err
		}
		url, note, stop = rs.URL, fmt.Sprintf("a redis-server of this phase's own, started empty (%s)", rs.Version()), rs.Stop
	}
	sub := &env{o: e.o, redisURL: url}
	rdb, err = sub.redisClient(pool)
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	return rdb, note, func() { rdb.Close(); stop() }, nil
}
