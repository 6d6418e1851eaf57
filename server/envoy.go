package server

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/envoyconf"
	"github.com/ratescope/ratescope/server/readiness"
	"github.com/ratescope/ratescope/server/rls"
)

// envoyService is the Envoy rate limit service of --grpc-addr: the
// rls adapter over the app's Checker, served on its own listener beside the
// HTTP server and stopped with it.
type envoyService struct {
	srv *rls.Server
	ln  net.Listener
	// failOpen keeps health SERVING while Redis cannot decide: as /readyz
	// says, every call still gets an answer then.
	failOpen bool
	maps     atomic.Pointer[envoyMaps]
}

// envoyMaps are one settings' Envoy mappings in the adapter's terms, built
// once per config rather than once per call.
type envoyMaps struct {
	set  *settings
	maps []rls.Mapping
}

// listenEnvoy listens on addr and starts the gRPC server's health, or
// returns nil when addr is empty. Health follows Redis from here on
// (redisStatus); serve registers the service itself.
func listenEnvoy(addr string, failMode httplimit.FailMode, log *slog.Logger, opts ...grpc.ServerOption) (*envoyService, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on --grpc-addr %s for the Envoy rate limit service: %w", addr, err)
	}
	return &envoyService{srv: rls.NewServer(log, opts...), ln: ln, failOpen: failMode == httplimit.FailOpen}, nil
}

// grpcMaxWait is how many check timeouts a gRPC check may take in all. Its
// check timeout bounds only Redis's round trip, counted from when the check
// is sent: on a saturated machine a call may queue first (behind pipelines
// in flight, for a CPU), and envoyproxy/ratelimit then slows down rather
// than failing. The bound that matters is the caller's: Envoy's rate limit
// filter sends its timeout as the call's deadline, which every check keeps.
const grpcMaxWait = 10

// register adds the service: every call decides through checker, as the
// HTTP checks do, with the config in force at the call, so reloads apply —
// but may wait grpcMaxWait check timeouts in all, not one.
func (e *envoyService) register(checker *httplimit.Checker, store *configStore, log *slog.Logger) {
	cfg, m := store.cfg, store.metrics
	grpcChecker := *checker // same limiter, fail mode and observers
	grpcChecker.MaxWait = grpcMaxWait * cmp.Or(checker.Timeout, httplimit.DefaultTimeout)
	checker = &grpcChecker
	var compat *rls.Compat
	if cfg.EnvoyCompat {
		h := cfg.EnvoyHeaders
		compat = &rls.Compat{Headers: h.Enabled, LimitHeader: h.Limit, RemainingHeader: h.Remaining, ResetHeader: h.Reset}
	}
	e.srv.Register(rls.New(rls.Deps{
		Checker:  checker,
		Policy:   store.policy,
		Mappings: func() []rls.Mapping { return e.mappings(store.load()) },
		Files:    func() *envoyconf.Set { return store.load().envoyFiles },
		// A limit override's policy is counted under its name, as any other.
		Prepare:        func(p limiter.Policy) *httplimit.Policy { return httplimit.Prepare(p, m.policyCounters(p.Name)) },
		Compat:         compat,
		Shadow:         cfg.EnvoyShadow,
		Stats:          m.envoyStats.count,
		NearLimitRatio: cfg.EnvoyNearLimitRatio,
		Log:            log,
	}))
}

// redisStatus follows readiness: with the fail mode closed, health is
// NOT_SERVING while Redis does not accept the limiter's writes, as /readyz
// answers 503 then.
func (e *envoyService) redisStatus(s readiness.State) { e.srv.SetServing(s.Ready() || e.failOpen) }

// serve accepts calls until stop.
func (e *envoyService) serve() error { return e.srv.Serve(e.ln) }

// stop stops gracefully: calls in flight finish unless ctx ends first.
func (e *envoyService) stop(ctx context.Context) { e.srv.Stop(ctx) }

// mappings are set's Envoy mappings in the adapter's terms.
func (e *envoyService) mappings(set *settings) []rls.Mapping {
	if m := e.maps.Load(); m != nil && m.set == set {
		return m.maps
	}
	m := &envoyMaps{set: set}
	for _, d := range set.envoy {
		for _, desc := range d.Descriptors {
			m.maps = append(m.maps, rls.Mapping{Domain: d.Domain, Keys: desc.Keys, Policy: desc.Policy})
		}
	}
	e.maps.Store(m)
	return m.maps
}
