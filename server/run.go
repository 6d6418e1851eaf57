// Package server wires ratescope together: configuration, Redis, the limiter,
// the HTTP API, the live WebSocket stream and the page.
package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ratescope/ratescope/internal/buildinfo"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/server/overview"
	"github.com/ratescope/ratescope/server/readiness"
	"github.com/ratescope/ratescope/server/redisconn"
)

// Server timeouts: slow or idle clients must not pin connections. A request's
// headers must arrive within readHeaderTimeout, the whole request with its
// body within readTimeout; a keep-alive connection waits idleTimeout for its
// next request.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second
	idleTimeout       = 30 * time.Second
	shutdownTimeout   = 10 * time.Second
	// warmTimeout bounds loading the limiter's scripts at start-up.
	warmTimeout = 5 * time.Second
)

// Run is the whole program: main calls it with the process's arguments
// (args[0] is the program name), environment and stdout, and tests call it the
// same way on :0. It returns when ctx is cancelled or SIGINT/SIGTERM arrives,
// after a graceful shutdown.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 1 && args[1] == "healthcheck" {
		return healthcheck(ctx, args[2:], getenv, stdout)
	}
	cfg, err := parseConfig(args[1:], getenv, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil
	case errors.Is(err, errVersion):
		fmt.Fprintln(stdout, buildinfo.Read())
		return nil
	case err != nil:
		return err
	}
	log := newLogger(cfg.LogFormat, cfg.LogLevel, stdout)
	if soft, hard, err := raiseOpenFiles(); err != nil {
		log.Warn("open files limit not raised", "soft", soft, "hard", hard, "err", err)
	} else {
		log.Info("open files limit", "soft", soft, "hard", hard)
	}

	m := newMetrics()
	store, err := newConfigStore(cfg, m, log)
	if err != nil {
		return err
	}
	rdb, closeRedis, err := redisconn.Connect(redisconn.Options{URL: cfg.RedisURL, Cluster: cfg.RedisCluster, Log: log})
	if err != nil {
		return err
	}
	defer closeRedis()

	lim := limiter.New(rdb, limiter.WithDenyCache(cfg.DenyCacheSize), limiter.WithDurableReplicas(cfg.DurableReplicas))
	m.countLocalDenials(lim)
	// Scripts loaded and connections open before the first checks, which
	// would otherwise each be sent twice; a Redis not up yet is warmed by
	// the checks themselves.
	warmCtx, stopWarm := context.WithTimeout(ctx, warmTimeout)
	warmDone := make(chan struct{})
	go func() {
		if err := lim.Warm(warmCtx); err != nil {
			log.Debug("could not load the limiter's scripts at start-up; checks will", "err", err)
		}
		close(warmDone)
	}()
	defer func() { stopWarm(); <-warmDone }() // before Redis closes
	store.onChange = lim.Forget
	// The deny cache serves only while it follows resets from every instance.
	cacheCtx, stopCache := context.WithCancel(context.Background())
	cacheDone := make(chan struct{})
	go func() { _ = lim.Run(cacheCtx); close(cacheDone) }()
	defer func() { stopCache(); <-cacheDone }() // before Redis closes
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", cfg.Addr, err)
	}
	ln = limitConns(ln, cfg.MaxConnsPerClient, func() httplimit.TrustedProxies { return store.load().trusted }, m.connsRefused)
	envoy, err := listenEnvoy(cfg.GRPCAddr, cfg.FailMode, log, newGRPCMetrics(m).options()...)
	if err != nil {
		ln.Close()
		return err
	}
	// Readiness hears of every check and tells gRPC health and the metrics.
	ready := readiness.New(rdb, log)
	ready.RequireReplicas(cfg.DurableReplicas)
	ready.OnChange(func(s readiness.State) { m.redisStatus(s.Ready()) })
	if envoy != nil {
		ready.OnChange(envoy.redisStatus)
	}
	readyCtx, stopReady := context.WithCancel(context.Background())
	readyDone := make(chan struct{})
	go func() { ready.Run(readyCtx); close(readyDone) }()
	defer func() { stopReady(); <-readyDone }()
	instance := uuid.NewString()[:8]
	recent := labRecent{rdb: rdb, timeout: cfg.CheckTimeout}
	// The live view comes first: every entry point's checks report to it.
	view := live.New(live.Deps{
		Redis:          rdb,
		ReadWindows:    lim.Windows,
		Policy:         store.lookup,
		LabRequests:    recent.read,
		Instance:       instance,
		TickInterval:   cfg.TickInterval,
		SnapshotBudget: cfg.SnapshotBudget,
		CheckTimeout:   cfg.CheckTimeout,
		Log:            log,
		Metrics:        m.live(),
	})
	// The overview counts every check too, on this instance, with no Redis.
	traffic := overview.New(overview.Deps{
		Redis:    rdb,
		Instance: instance,
		NowMs:    view.NowMs,
		Policies: store.policies,
		Watched:  view.OverviewWatched,
		Publish:  view.PublishOverview,
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
	}
	if envoy != nil {
		envoy.register(checker, store, log)
	}
	a := &app{
		cfg:       cfg,
		store:     store,
		lim:       lim,
		checker:   checker,
		auth:      authorizer{adminToken: cfg.AdminToken, apiToken: cfg.APIToken, publicLab: cfg.PublicLab},
		rdb:       rdb,
		log:       log,
		metrics:   m,
		instance:  instance,
		live:      view,
		labRecent: recent,
		labs:      labRegistry{rdb: rdb, max: cfg.MaxLabs},
		overview:  traffic,
		ready:     ready,
		viewers:   newSlots[string](cfg.MaxViewersPerClient, cfg.MaxViewers),
	}
	e := newEcho(a)

	srv := &http.Server{
		Handler:           e,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	reloads := store.watch()
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { reloads.run(watchCtx); close(watchDone) }()
	defer func() { stopWatch(); <-watchDone }()

	set := store.load()
	policies := make([]string, len(set.policies))
	for i, p := range set.policies {
		policies[i] = p.Policy.Policy.String()
	}
	log.Info("ratescope listening", "addr", ln.Addr().String(), "url", "http://"+displayAddr(ln.Addr()),
		"instance", a.instance, "fail_mode", cfg.FailMode, "check_timeout", cfg.CheckTimeout.String(), "durable_replicas", cfg.DurableReplicas,
		"policies", strings.Join(policies, ";"), "config", cfg.ConfigFile, "version", set.version,
		"routes", len(set.routes), "trusted_proxies", strings.Join(set.trusted.Strings(), ","))
	if envoy != nil {
		log.Info("envoy rate limit service listening", "addr", envoy.ln.Addr().String())
	}

	liveDone := make(chan struct{})
	go func() { a.live.Run(); close(liveDone) }()
	overviewCtx, stopOverview := context.WithCancel(context.Background())
	overviewDone := make(chan struct{})
	go func() { traffic.Run(overviewCtx); close(overviewDone) }()
	// Either server failing stops the whole app, the other one gracefully.
	serveErr := make(chan error, 2)
	go func() {
		if err := srv.Serve(ln); err != http.ErrServerClosed {
			serveErr <- fmt.Errorf("failed to serve: %w", err)
		}
	}()
	if envoy != nil {
		go func() {
			if err := envoy.serve(); err != nil {
				serveErr <- err
			}
		}()
	}

	var failed error
	select {
	case failed = <-serveErr:
		log.Error("a server failed; stopping", "err", failed)
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	// Viewers get a 1001 close; in-flight checks finish; then the live loops stop.
	a.live.Shutdown(sctx)
	<-liveDone
	stopOverview()
	<-overviewDone
	// HTTP and gRPC stop together, under one deadline: calls in flight on
	// either finish, unless the deadline passes first.
	envoyDone := make(chan struct{})
	go func() {
		if envoy != nil {
			envoy.stop(sctx)
		}
		close(envoyDone)
	}()
	shutErr := srv.Shutdown(sctx)
	<-envoyDone
	switch {
	case failed != nil:
		return failed
	case shutErr != nil:
		return fmt.Errorf("failed to shut down gracefully: %w", shutErr)
	}
	log.Info("stopped")
	return nil
}

func newLogger(format string, level slog.Level, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// displayAddr turns a wildcard listen address into one a browser can open.
func displayAddr(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		return fmt.Sprintf("localhost:%d", tcp.Port)
	}
	return tcp.String()
}

func newEcho(a *app) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(a.log)
	traffic := &httpMetrics{m: a.metrics}
	e.Use(traffic.middleware) // outermost: it counts the status the client got
	// The access log is outside Recover, so a recovered panic is logged with
	// the 500 it became.
	e.Use(middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		Skipper: func(c echo.Context) bool {
			switch c.Path() {
			case "/healthz", "/readyz", "/metrics", "/static/*":
				return true
			}
			return false
		},
		LogMethod: true, LogURIPath: true, LogStatus: true, LogLatency: true,
		// An error (a problem document, a 404, a 500) is written here, so the
		// line records the status the client received, not the 200 the
		// response held before the handler failed.
		HandleError: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			// Checks are the hot path and are counted in metrics; their access
			// lines are debug-level unless something failed. Nothing is built
			// for a line that is not logged (the remote address included).
			level := slog.LevelInfo
			if hotPath(c.Path()) && v.Status < 500 {
				level = slog.LevelDebug
			}
			ctx := c.Request().Context()
			if !a.log.Enabled(ctx, level) {
				return nil
			}
			a.log.LogAttrs(ctx, level, "request", slog.String("method", v.Method),
				slog.String("path", v.URIPath), slog.Int("status", v.Status),
				slog.Float64("latency_ms", float64(v.Latency.Microseconds())/1000), slog.String("remote", c.RealIP()))
			return nil
		},
	}))
	e.Use(middleware.Recover())
	e.Use(securityHeaders)
	routes(e, a)
	traffic.prepare(e.Routes())
	return e
}

// hotPath reports whether a route answers checks: counted in metrics, logged
// at debug level.
func hotPath(path string) bool {
	return path == "/api/v1/check" || path == forwardAuthPrefix || path == forwardAuthPrefix+"/*"
}

// securityHeaders sets the usual hardening headers on every response. The
// page needs no inline script or style, so the policy allows none. The values
// are shared, set by canonical key: this runs on every request (net/http
// never writes into a header's value slice; Add appends to a full one, which
// copies it).
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		for _, kv := range hardening {
			h[kv.key] = kv.value
		}
		return next(c)
	}
}

var hardening = []struct {
	key   string
	value []string
}{
	{"X-Content-Type-Options", []string{"nosniff"}},
	{"X-Frame-Options", []string{"DENY"}},
	{"Referrer-Policy", []string{"no-referrer"}},
	{"Cross-Origin-Opener-Policy", []string{"same-origin"}},
	{"Content-Security-Policy", []string{"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"}},
}

// healthcheck probes /healthz of a server on this machine: the compose
// healthcheck of the distroless image, which has no shell or curl.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	addr := getenv("RATESCOPE_ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	fs := flag.NewFlagSet("ratescope healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // an error is returned, and printed once by main
	fs.Usage = func() {}
	fs.StringVar(&addr, "addr", addr, "the server's listen address (RATESCOPE_ADDR)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "Usage: ratescope healthcheck [--addr A]\n\nExits 0 when GET /healthz of the server on this machine answers 200 within 3 s.\n\nFlags:")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("healthcheck: %w", err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("failed to read address %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("failed to reach /healthz: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %s", resp.Status)
	}
	return nil
}
