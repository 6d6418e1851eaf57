// Package rls is Envoy's global rate limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, as a thin
// adapter over the limiter: it translates each descriptor of a request into
// (client key, policy, cost), asks the same limiter the HTTP check asks, and
// translates the decisions back. It has no rate-limit logic of its own.
//
// Envoy, Istio, Envoy Gateway, Contour and Emissary all call this one API, so
// ratescope can stand in for envoyproxy/ratelimit with their configuration
// unchanged, and with sliding windows, several rules per policy and exact
// retry times.
package rls

import (
	"context"
	"errors"
	"log/slog"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratescope/ratescope/limiter"
)

// Decider decides and records one request, as *limiter.Limiter does.
type Decider interface {
	Allow(ctx context.Context, key string, p limiter.Policy, cost int) (limiter.Decision, error)
}

// Mapping sends the descriptors of one domain whose entry keys are exactly
// Keys, in order, to the policy named Policy (the config file's
// envoy[].descriptors[]).
type Mapping struct {
	Domain string
	Keys   []string
	Policy string
}

// Metrics are the hooks a check feeds, the same the HTTP check feeds; the
// server points them at its Prometheus metrics. Nil fields are skipped.
type Metrics struct {
	// InFlight moves the checks-in-flight gauge by +1 before and -1 after
	// each limiter call.
	InFlight func(delta int)
	// Duration observes how long one limiter call took.
	Duration func(time.Duration)
	// Decided counts a decision (ratescope_decisions_total).
	Decided func(limiter.Decision)
	// RedisError counts and reports a limiter call that failed or timed out;
	// when nil, Deps.Log gets a warning instead.
	RedisError func(policy string, err error)
	// FailOpen counts a descriptor answered OK because the limiter failed and
	// the fail mode is open (ratescope_fail_open_total).
	FailOpen func(policy string)
}

// Deps is everything the service uses. Limiter, Policy and Mappings are
// required; the rest may be left zero.
type Deps struct {
	Limiter Decider
	// Policy looks a policy up by name at the moment of each request: policies
	// reload at runtime.
	Policy func(name string) (limiter.Policy, bool)
	// Mappings returns the descriptor mappings in force, also per request.
	Mappings func() []Mapping
	// Headers formats a decision's RateLimit and RateLimit-Policy fields, the
	// same as the HTTP check's. Nil: the response carries neither.
	Headers func(limiter.Decision) (rateLimit, rateLimitPolicy string)
	// OnDecision is called with every decision, e.g. to stream it to viewers.
	OnDecision func(limiter.Decision)
	// CheckTimeout bounds the limiter calls of one request (all descriptors
	// together); zero means DefaultCheckTimeout.
	CheckTimeout time.Duration
	// FailOpen picks what a limiter failure (Redis down or slower than
	// CheckTimeout) answers. False (fail-closed, the default): the whole call
	// fails with codes.Unavailable, and Envoy's own failure_mode_deny decides
	// what the request gets. True: each descriptor the limiter could not
	// decide is OK with no limit, counted by Metrics.FailOpen; descriptors
	// that were decided keep their answers.
	FailOpen bool
	Metrics  Metrics
	// Log gets a warning per failed limiter call (unless Metrics.RedisError
	// reports them) and per descriptor mapped to a missing policy; nil
	// discards them.
	Log *slog.Logger
}

// DefaultCheckTimeout is the check timeout when Deps leaves it zero: the
// server's --check-timeout default.
const DefaultCheckTimeout = 150 * time.Millisecond

// Service implements RateLimitServiceServer. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	deps Deps
}

// New returns the service over deps.
func New(deps Deps) *Service {
	if deps.CheckTimeout <= 0 {
		deps.CheckTimeout = DefaultCheckTimeout
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{deps: deps}
}

// ShouldRateLimit decides every descriptor of req. The whole request is
// translated and validated before anything is counted, so a malformed
// request gets codes.InvalidArgument and records nothing.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	checks, err := translate(req, s.deps.Mappings(), s.deps.Policy)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	for _, c := range checks {
		if c.orphan != "" {
			s.deps.Log.Warn("envoy descriptor maps to a policy that is not configured; answered as unmapped",
				"domain", req.GetDomain(), "policy", c.orphan)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.deps.CheckTimeout)
	defer cancel()
	outcomes := s.decide(ctx, checks)
	for i, o := range outcomes {
		switch {
		case o.err == nil:
			continue
		case errors.Is(o.err, limiter.ErrInvalidKey), errors.Is(o.err, limiter.ErrInvalidCost):
			// translate rules these out; a limiter with stricter rules still
			// gets the caller's fault reported as such.
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: %v", i, o.err)
		case !s.deps.FailOpen:
			return nil, status.Error(codes.Unavailable, "the limiter could not reach Redis in time; try again shortly")
		}
		if f := s.deps.Metrics.FailOpen; f != nil {
			f(checks[i].policy.Name)
		}
	}
	return respond(outcomes, s.deps.Headers), nil
}

// outcome is what became of one descriptor: a decision, an error, a cost
// its policy can never allow (never), or none of them when it maps to no
// policy.
type outcome struct {
	decided bool
	d       limiter.Decision
	err     error
	never   *limiter.Policy
}

// decide runs the mapped checks, concurrently when there are several (the
// limiter pipelines concurrent calls into one round trip). A panic in one of
// them is raised again here, on the handler's goroutine, where the server's
// interceptor turns it into codes.Internal.
func (s *Service) decide(ctx context.Context, checks []check) []outcome {
	out := make([]outcome, len(checks))
	mapped := 0
	for i, c := range checks {
		switch {
		case c.mapped() && c.never:
			out[i] = outcome{never: &c.policy}
		case c.mapped():
			mapped++
		}
	}
	if mapped <= 1 {
		for i, c := range checks {
			if c.asks() {
				out[i] = s.allow(ctx, c)
			}
		}
		return out
	}
	panics := make(chan any, len(checks))
	for i, c := range checks {
		if !c.asks() {
			continue
		}
		go func() {
			defer func() { panics <- recover() }()
			out[i] = s.allow(ctx, c)
		}()
	}
	var first any
	for range mapped {
		if p := <-panics; p != nil && first == nil {
			first = p
		}
	}
	if first != nil {
		panic(first)
	}
	return out
}

// allow is one limiter call with its metrics and hooks, as the HTTP check
// makes it.
func (s *Service) allow(ctx context.Context, c check) outcome {
	m := s.deps.Metrics
	if m.InFlight != nil {
		m.InFlight(1)
		defer m.InFlight(-1)
	}
	start := time.Now()
	d, err := s.deps.Limiter.Allow(ctx, c.key, c.policy, c.cost)
	if m.Duration != nil {
		m.Duration(time.Since(start))
	}
	if err != nil {
		if errors.Is(err, limiter.ErrInvalidKey) || errors.Is(err, limiter.ErrInvalidCost) {
			return outcome{err: err}
		}
		if m.RedisError != nil {
			m.RedisError(c.policy.Name, err)
		} else {
			s.deps.Log.Warn("envoy check failed", "policy", c.policy.Name, "fail_open", s.deps.FailOpen, "err", err)
		}
		return outcome{err: err}
	}
	if m.Decided != nil {
		m.Decided(d)
	}
	if s.deps.OnDecision != nil {
		s.deps.OnDecision(d)
	}
	return outcome{decided: true, d: d}
}
