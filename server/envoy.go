package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/readiness"
	"github.com/ratescope/ratescope/server/rls"
)

// envoyService is the Envoy rate limit service of --grpc-addr (SPEC §7): the
// rls adapter over the app's limiter, served on its own listener beside the
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

// listenEnvoy listens on --grpc-addr and builds the service, or returns nil
// when the flag is empty. Its checks go through checkHooks, as the HTTP
// checks do, and read the config in force on every call, so reloads apply.
func listenEnvoy(a *app) (*envoyService, error) {
	if a.cfg.GRPCAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", a.cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on --grpc-addr %s for the Envoy rate limit service: %w", a.cfg.GRPCAddr, err)
	}
	e := &envoyService{ln: ln, failOpen: a.cfg.FailMode == FailOpen}
	h := checkHooks{a}
	e.srv = rls.NewServer(rls.New(rls.Deps{
		Limiter:      a.lim,
		Policy:       a.store.lookup,
		Mappings:     func() []rls.Mapping { return e.mappings(a.store.load()) },
		Headers:      func(d limiter.Decision) (string, string) { return rateLimitHeaders(a.store.load(), d) },
		OnDecision:   h.decided,
		CheckTimeout: a.cfg.CheckTimeout,
		FailOpen:     e.failOpen,
		Metrics: rls.Metrics{
			InFlight: func(delta int) {
				if delta > 0 {
					h.started()
				} else {
					h.finished()
				}
			},
			Duration:   h.took,
			RedisError: h.failed,
			FailOpen:   h.failedOpen,
		},
		Log: a.log,
	}))
	return e, nil
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

// rateLimitHeaders are d's RateLimit and RateLimit-Policy fields, written as
// the HTTP check writes them, with the policy prepared in set; a policy that
// a reload changed while d was being decided is described by d's own rules.
func rateLimitHeaders(set *settings, d limiter.Decision) (rateLimit, rateLimitPolicy string) {
	var p *httplimit.Policy
	if e, ok := set.policy(d.Policy); ok && sameRules(e.Rules, d.Rules) {
		p = e.Policy
	} else {
		rules := make([]limiter.Rule, len(d.Rules))
		for i, r := range d.Rules {
			rules[i] = limiter.Rule{Limit: r.Limit, Window: time.Duration(r.WindowMs) * time.Millisecond}
		}
		p = httplimit.Prepare(limiter.Policy{Name: d.Policy, Rules: rules})
	}
	h := http.Header{}
	httplimit.SetHeaders(h, p, d)
	return h.Get("RateLimit"), h.Get("RateLimit-Policy")
}

func sameRules(rules []limiter.Rule, states []limiter.RuleState) bool {
	if len(rules) != len(states) {
		return false
	}
	for i, r := range rules {
		if r.Limit != states[i].Limit || r.WindowMs() != states[i].WindowMs {
			return false
		}
	}
	return true
}
