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
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ratescope/ratescope/internal/buildinfo"
	"github.com/ratescope/ratescope/internal/gcfloor"
	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/server/redisconn"
)

const (
	// shutdownTimeout bounds a graceful shutdown: calls in flight finish
	// within it.
	shutdownTimeout = 10 * time.Second
	// warmTimeout bounds loading the limiter's scripts at start-up.
	warmTimeout = 5 * time.Second
	// heapFloor is how far the Go heap may grow between collections while
	// little is alive: a busy instance keeps a few MB alive, and at the
	// runtime's 4 MB default it collected ~60 times a second. GOGC in the
	// environment turns it off.
	heapFloor = 32 << 20
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
	defer gcfloor.Keep(heapFloor, getenv)()
	// Which Redis comes first in the log: the embedded demo's says so there.
	// The live view has a client of its own: however many viewers, checks
	// keep their connections.
	rdb, viewsRdb, closeRedis, err := redisconn.ConnectWithViews(redisconn.Options{URL: cfg.RedisURL, Cluster: cfg.RedisCluster, Log: log})
	if err != nil {
		return err
	}
	defer closeRedis()
	logOpenFiles(log)

	m := newMetrics()
	store, err := newConfigStore(cfg, m, log)
	if err != nil {
		return err
	}
	var bg background
	defer bg.stop() // before Redis closes
	lim := startLimiter(ctx, &bg, cfg, rdb, m, log)
	ten := startOverrides(&bg, cfg, rdb, store, lim, m, log)
	store.onChange = func(policies ...string) {
		lim.Forget(policies...)
		ten.Refresh() // a policy added may have overrides already
	}

	ln, envoy, err := listen(cfg, store, m, log)
	if err != nil {
		return err
	}
	ready := startReadiness(&bg, cfg, rdb, m, envoy, log)
	p := assemble(cfg, rdb, viewsRdb, lim, ten, store, ready, m, log)
	if envoy != nil {
		envoy.register(p.checker, store, log)
	}
	srv := newHTTPServer(newEcho(p), log)
	bg.run(ctx, store.watch().run)
	logListening(log, cfg, store.load(), ln.Addr(), envoy, p.instance)
	var views background                                                    // what the servers feed, stopped before they are
	views.run(context.Background(), func(context.Context) { p.live.Run() }) // until Shutdown
	views.run(context.Background(), p.overview.Run)

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
	p.waiters.stop() // held checks give their slots back and answer 503
	if err := shutdown(log, srv, envoy, p.live, &views); failed == nil {
		failed = err
	}
	return failed
}

// shutdown stops the servers and the views they feed, under one deadline:
// viewers get a 1001 close and in-flight checks finish, then the live and
// overview loops stop, then HTTP and gRPC stop together — calls in flight on
// either finish, unless the deadline passes first.
func shutdown(log *slog.Logger, srv *http.Server, envoy *envoyService, view *live.View, views *background) error {
	log.Info("shutting down", "timeout", shutdownTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	view.Shutdown(ctx)
	views.stop()
	envoyDone := make(chan struct{})
	go func() {
		if envoy != nil {
			envoy.stop(ctx)
		}
		close(envoyDone)
	}()
	err := srv.Shutdown(ctx)
	<-envoyDone
	if err != nil {
		return fmt.Errorf("failed to shut down gracefully: %w", err)
	}
	log.Info("stopped")
	return nil
}
