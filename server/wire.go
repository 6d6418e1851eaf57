package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/server/overview"
	"github.com/ratescope/ratescope/server/readiness"
	"github.com/ratescope/ratescope/server/tenants"
)

// What Run builds, in the order it builds it.

func newLogger(format string, level slog.Level, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logOpenFiles raises the open-files soft limit to the hard limit, and says
// what it is.
func logOpenFiles(log *slog.Logger) {
	if soft, hard, err := raiseOpenFiles(); err != nil {
		log.Warn("open files limit not raised", "soft", soft, "hard", hard, "err", err)
	} else {
		log.Info("open files limit", "soft", soft, "hard", hard)
	}
}

// startLimiter makes the limiter and starts in bg what it needs: its scripts
// loaded and connections opened before the first checks, which would
// otherwise each be sent twice (a Redis not up yet is warmed by the checks
// themselves), and the deny cache following resets from every instance —
// it serves only while it does.
func startLimiter(ctx context.Context, bg *background, cfg Config, rdb redis.UniversalClient, m *metrics, log *slog.Logger) *limiter.Limiter {
	lim := limiter.New(rdb, limiter.WithDenyCache(cfg.DenyCacheSize), limiter.WithDurableReplicas(cfg.DurableReplicas))
	m.countLocalDenials(lim)
	bg.run(ctx, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, warmTimeout)
		defer cancel()
		if err := lim.Warm(ctx); err != nil {
			log.Debug("could not load the limiter's scripts at start-up; checks will", "err", err)
		}
	})
	bg.run(context.Background(), func(ctx context.Context) { _ = lim.Run(ctx) })
	return lim
}

// listen opens the HTTP listener, its connections capped per client, and
// the Envoy rate limit service's when --grpc-addr is set (nil otherwise).
func listen(cfg Config, store *configStore, m *metrics, log *slog.Logger) (net.Listener, *envoyService, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to listen on %s: %w", cfg.Addr, err)
	}
	ln = limitConns(ln, cfg.MaxConnsPerClient, func() httplimit.TrustedProxies { return store.load().trusted }, m.connsRefused)
	envoy, err := listenEnvoy(cfg.GRPCAddr, cfg.FailMode, log, newGRPCMetrics(m).options()...)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	return ln, envoy, nil
}

// startReadiness starts in bg the monitor of whether Redis accepts the
// limiter's writes; it tells the metrics and gRPC health, and hears of every
// check (assemble makes it an observer).
func startReadiness(bg *background, cfg Config, rdb redis.UniversalClient, m *metrics, envoy *envoyService, log *slog.Logger) *readiness.Monitor {
	ready := readiness.New(rdb, log)
	ready.RequireReplicas(cfg.DurableReplicas)
	ready.OnChange(func(s readiness.State) { m.redisStatus(s.Ready()) })
	if envoy != nil {
		ready.OnChange(envoy.redisStatus)
	}
	bg.run(context.Background(), ready.Run)
	return ready
}

// assemble builds the live view, the overview and the Checker every entry
// point decides through, with everything that observes its checks, and
// gathers what the routes use. The live view and the overview reach Redis
// through views, a client with a pool of its own (redisconn.ConnectWithViews),
// so their reads and Pub/Sub never hold a connection a check waits for.
func assemble(cfg Config, rdb, views redis.UniversalClient, lim *limiter.Limiter, ten *tenants.Store, store *configStore,
	ready *readiness.Monitor, m *metrics, log *slog.Logger) *parts {
	instance := uuid.NewString()[:8]
	recent := labRecent{rdb: rdb, timeout: cfg.CheckTimeout}
	inForce := rulesInForce{store: store, ten: ten}
	// The live view comes first: every entry point's checks report to it.
	// Its viewers see windows under the rules in force, and hear of every
	// change of an override this instance applies.
	view := live.New(live.Deps{
		Redis: views,
		// Reads only: no batching and no deny cache to run.
		ReadWindows:    limiter.New(views, limiter.WithDenyCache(0)).Windows,
		Policy:         store.lookup,
		Resolve:        inForce.live,
		LabRequests:    recent.read,
		Instance:       instance,
		TickInterval:   cfg.TickInterval,
		SnapshotBudget: cfg.SnapshotBudget,
		CheckTimeout:   cfg.CheckTimeout,
		Log:            log,
		Metrics:        m.live(),
	})
	ten.OnChange(view.OverrideChanged)
	// The overview counts every check too, on this instance, with no Redis.
	traffic := overview.New(overview.Deps{
		Redis:    views,
		Instance: instance,
		NowMs:    view.NowMs,
		Policies: store.policies,
		Watched:  view.OverviewWatched,
		Publish:  view.PublishOverview,
		Override: inForce.label,
		Timeout:  cfg.CheckTimeout,
		Log:      log,
	})
	checker := &httplimit.Checker{
		Limiter:  lim,
		Timeout:  cfg.CheckTimeout,
		FailMode: cfg.FailMode,
		Observers: []httplimit.Observer{
			checkMetrics{m: m, log: log, failMode: cfg.FailMode},
			ready,
			httplimit.Hooks{Decision: view.Decision},
			traffic.Collector(),
		},
		Resolve: ten.Resolve, // every entry point decides with the overrides
	}
	return &parts{
		store: store, checker: checker, lim: lim, rdb: rdb, live: view, overview: traffic, ready: ready, tenants: ten, inForce: inForce,
		auth:    authorizer{adminToken: cfg.AdminToken, apiToken: cfg.APIToken, publicLab: cfg.PublicLab},
		metrics: m, log: log,
		instance: instance, tickInterval: cfg.TickInterval, checkTimeout: cfg.CheckTimeout,
		failMode: cfg.FailMode, origins: cfg.AllowedOrigins,
		viewers:   newSlots[string](cfg.MaxViewersPerClient, cfg.MaxViewers),
		races:     &races{},
		labs:      labRegistry{rdb: rdb, max: cfg.MaxLabs},
		labRecent: recent,
		waiters:   newWaiters(cfg.MaxWaiters, m),
	}
}

// logListening says the server is up: where, how it decides, what it
// enforces.
func logListening(log *slog.Logger, cfg Config, set *settings, addr net.Addr, envoy *envoyService, instance string) {
	policies := make([]string, len(set.policies))
	for i, p := range set.policies {
		policies[i] = p.Policy.Policy.String()
	}
	log.Info("ratescope listening", "addr", addr.String(), "url", "http://"+displayAddr(addr),
		"instance", instance, "fail_mode", cfg.FailMode, "check_timeout", cfg.CheckTimeout.String(), "durable_replicas", cfg.DurableReplicas,
		"policies", strings.Join(policies, ";"), "config", cfg.ConfigFile, "version", set.version,
		"routes", len(set.routes), "trusted_proxies", strings.Join(set.trusted.Strings(), ","))
	if envoy != nil {
		log.Info("envoy rate limit service listening", "addr", envoy.ln.Addr().String())
	}
}
