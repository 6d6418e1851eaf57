package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/embedredis"
)

// dialTimeout bounds connecting to Redis; checks are bounded by their context.
const dialTimeout = time.Second

// connectRedis builds the client SPEC §1 describes: the embedded Redis when no
// URL is given, go-redis's failover client when the URL names a Sentinel
// master (master_name=), a cluster client when the URL carries addr=
// parameters or --redis-cluster is set, else a single-node client. It does not wait for
// Redis: an unreachable Redis is reported by /readyz and the fail mode.
func connectRedis(cfg Config, log *slog.Logger) (redis.UniversalClient, func(), error) {
	rdb, release, err := connectRedisURL(cfg, log)
	if err != nil {
		// Parsers quote the URL they refuse, password and all.
		return nil, nil, redact(err, urlSecrets(cfg.RedisURL))
	}
	return rdb, release, nil
}

func connectRedisURL(cfg Config, log *slog.Logger) (redis.UniversalClient, func(), error) {
	quietRedisLogs.Do(func() { redis.SetLogger(redisLogger{}) })
	release := func() {} // what goes with the client: the embedded Redis, the Sentinel guard
	rawURL := cfg.RedisURL
	if rawURL == "" {
		emb, err := embedredis.Start()
		if err != nil {
			return nil, nil, err
		}
		release = emb.Close
		rawURL = emb.URL()
		log.Info("using the embedded in-process Redis (miniredis) on "+emb.Addr()+": fine for the demo, not for production; set REDIS_URL=redis://host:6379/0 or --redis-url to use a real Redis",
			"redis", "embedded")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("failed to parse the Redis URL: %w", err)
	}
	var rdb redis.UniversalClient
	if u.Query().Has("master_name") {
		if cfg.RedisCluster {
			release()
			return nil, nil, errors.New("failed to connect to Redis: --redis-cluster and a Sentinel URL (master_name=) exclude each other")
		}
		var closeGuard func()
		if rdb, closeGuard, err = connectSentinel(rawURL, log); err != nil {
			release()
			return nil, nil, err
		}
		release = closeGuard // a URL was given: there is no embedded Redis
	} else if cfg.RedisCluster || u.Query().Has("addr") {
		opt, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("failed to parse the Redis Cluster URL: %w", err)
		}
		// No retries: a retried script may have run already and would record twice.
		opt.ContextTimeoutEnabled, opt.MaxRetries, opt.DialTimeout = true, -1, dialTimeout
		rdb = redis.NewClusterClient(opt)
		log.Info("using a Redis Cluster", "redis", "cluster", "seeds", opt.Addrs)
	} else {
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("failed to parse the Redis URL: %w", err)
		}
		opt.ContextTimeoutEnabled, opt.MaxRetries, opt.DialTimeout = true, -1, dialTimeout
		rdb = redis.NewClient(opt)
		if cfg.RedisURL != "" {
			log.Info("using Redis", "redis", "standalone", "addr", opt.Addr)
		}
	}
	return rdb, func() { _ = rdb.Close(); release() }, nil
}

// quietRedisLogs: go-redis logs pool dial failures by itself to stderr; the
// server reports Redis failures through its own logs, metrics and /readyz,
// so those lines go to the default slog logger at debug level instead.
var quietRedisLogs sync.Once

type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
