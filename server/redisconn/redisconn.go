// Package redisconn turns the Redis URL ratescope is given into the clients
// every check, reset and live view goes through: the embedded demo Redis
// when there is no URL, one Redis, a Redis Cluster, or the master a set of
// Redis Sentinels names — kept off a master they are failing over, and off a
// demoted one at its first READONLY answer.
//
// Every client it builds bounds each call by the caller's context and never
// retries a command: a retried script may have run already and would record
// a request twice. Errors never print the URL's passwords.
//
// Knows no HTTP: the server, the load tool or a test can connect the same way.
package redisconn

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

// Options is what a connection needs.
type Options struct {
	// URL names the Redis: redis:// or rediss://, with addr= parameters for
	// a cluster's other seeds or a Sentinel deployment's other sentinels, and
	// master_name= for Sentinel. Empty: the embedded in-process Redis.
	URL string
	// Cluster reads URL as a Redis Cluster's even without addr= parameters.
	Cluster bool
	// Log gets one line saying which Redis is used; nil: slog.Default().
	Log *slog.Logger
}

// Connect builds the client for the Redis o.URL names: the embedded Redis
// when no URL is given, go-redis's failover client when the URL names a
// Sentinel master (master_name=), a cluster client when the URL carries addr=
// parameters or o.Cluster is set, else a single-node client. It does not wait
// for Redis: an unreachable Redis shows in the calls made through the client
// (the server's /readyz and fail mode report it). The func it returns closes
// the client and what goes with it: the embedded Redis, the Sentinel guard's
// connections.
func Connect(o Options) (redis.UniversalClient, func(), error) {
	rdb, _, release, err := connectAll(o, false)
	return rdb, release, err
}

// ConnectWithViews is Connect with a second client of the same Redis, with
// a connection pool of its own, for the live view: its reads (the clock,
// snapshots of however many windows viewers watch or join at once) and its
// Pub/Sub never take a connection a check waits for, nor queue ahead of one.
// The func it returns closes both.
func ConnectWithViews(o Options) (checks, views redis.UniversalClient, close func(), err error) {
	return connectAll(o, true)
}

func connectAll(o Options, withViews bool) (checks, views redis.UniversalClient, close func(), err error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	quietRedisLogs.Do(func() { redis.SetLogger(redisLogger{}) })
	release := func() {} // what goes with the clients: the embedded Redis
	rawURL := o.URL
	if rawURL == "" {
		emb, err := embedredis.Start()
		if err != nil {
			return nil, nil, nil, err
		}
		release = emb.Close
		rawURL = emb.URL()
		o.Log.Info("using the embedded in-process Redis (miniredis) on "+emb.Addr()+": fine for the demo, not for production; set REDIS_URL=redis://host:6379/0 or --redis-url to use a real Redis",
			"redis", "embedded")
	}
	checks, closeChecks, err := connect(rawURL, o)
	if err != nil {
		release()
		// Parsers quote the URL they refuse, password and all.
		return nil, nil, nil, redact(err, urlSecrets(o.URL))
	}
	closeViews := func() {}
	if withViews {
		quiet := o
		quiet.Log = slog.New(slog.DiscardHandler) // which Redis is used was said once
		if views, closeViews, err = connect(rawURL, quiet); err != nil {
			closeChecks()
			release()
			return nil, nil, nil, redact(err, urlSecrets(o.URL))
		}
	}
	return checks, views, func() { closeViews(); closeChecks(); release() }, nil
}

// connect builds one client of the Redis rawURL names; the func it returns
// closes it and what goes with it (the Sentinel guard's connections).
func connect(rawURL string, o Options) (redis.UniversalClient, func(), error) {
	release := func() {}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse the Redis URL: %w", err)
	}
	var rdb redis.UniversalClient
	if u.Query().Has("master_name") {
		if o.Cluster {
			return nil, nil, errors.New("failed to connect to Redis: --redis-cluster and a Sentinel URL (master_name=) exclude each other")
		}
		if rdb, release, err = connectSentinel(rawURL, o.Log); err != nil {
			return nil, nil, err
		}
	} else if o.Cluster || u.Query().Has("addr") {
		opt, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to parse the Redis Cluster URL: %w", err)
		}
		// No retries: a retried script may have run already and would record twice.
		opt.ContextTimeoutEnabled, opt.MaxRetries, opt.DialTimeout = true, -1, dialTimeout
		rdb = redis.NewClusterClient(opt)
		o.Log.Info("using a Redis Cluster", "redis", "cluster", "seeds", opt.Addrs)
	} else {
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to parse the Redis URL: %w", err)
		}
		opt.ContextTimeoutEnabled, opt.MaxRetries, opt.DialTimeout = true, -1, dialTimeout
		rdb = redis.NewClient(opt)
		if o.URL != "" {
			o.Log.Info("using Redis", "redis", "standalone", "addr", opt.Addr)
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
