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
	"sync"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/envoyconf"
)

// Mapping sends the descriptors of one domain whose entry keys are exactly
// Keys, in order, to the policy named Policy (the config file's
// envoy[].descriptors[]).
type Mapping struct {
	Domain string
	Keys   []string
	Policy string
}

// Deps is everything the service uses; Log may be left nil.
type Deps struct {
	// Checker decides every mapped descriptor, as it decides the HTTP
	// checks: its timeout bounds each limiter call, its fail mode answers
	// when Redis fails, and its observers see every check. Fail-closed: the
	// whole call fails with codes.Unavailable, and Envoy's own
	// failure_mode_deny decides what the request gets. Fail-open: each
	// descriptor the limiter could not decide is OK with no limit;
	// descriptors that were decided keep their answers.
	Checker *httplimit.Checker
	// Policy looks a policy up by name at the moment of each request:
	// policies reload at runtime. Its RateLimit fields are the response's.
	Policy func(name string) (*httplimit.Policy, bool)
	// Mappings returns the descriptor mappings in force, also per request.
	Mappings func() []Mapping
	// Files returns envoyproxy/ratelimit's files in force, per request; nil
	// (or a nil Set): none. A request for one of their domains is answered
	// from them, as envoyproxy/ratelimit would, never from Mappings.
	Files func() *envoyconf.Set
	// Prepare readies a policy made for one request — a descriptor's limit
	// override — as the config's policies are readied; nil:
	// httplimit.Prepare with no observers of its own.
	Prepare func(limiter.Policy) *httplimit.Policy
	// Compat, when set, answers as envoyproxy/ratelimit does, field for
	// field (--envoy-compat).
	Compat *Compat
	// Shadow is envoyproxy/ratelimit's SHADOW_MODE: the overall answer is
	// OK whatever the statuses say.
	Shadow bool
	// Stats, when set, is told what each decided descriptor of the files
	// adds to its statistics, under its statistics key as
	// envoyproxy/ratelimit names it (Stat). Keys that hold the request's
	// values are as many as the values clients send: Stats must bound what
	// it keeps of them.
	Stats func(s Stat, h Hits)
	// NearLimitRatio is where Stats' near limit begins, as a fraction of the
	// limit (NEAR_LIMIT_RATIO); 0: DefaultNearLimitRatio.
	NearLimitRatio float64
	// Log gets a warning per descriptor mapped to a missing policy; nil
	// discards them.
	Log *slog.Logger
}

// Service implements RateLimitServiceServer. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	deps Deps
}

// New returns the service over deps.
func New(deps Deps) *Service {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Files == nil {
		deps.Files = func() *envoyconf.Set { return nil }
	}
	if deps.NearLimitRatio <= 0 {
		deps.NearLimitRatio = DefaultNearLimitRatio
	}
	if deps.Prepare == nil {
		deps.Prepare = func(p limiter.Policy) *httplimit.Policy { return httplimit.Prepare(p) }
	}
	return &Service{deps: deps}
}

// ShouldRateLimit decides every descriptor of req. The whole request is
// translated and validated before anything is counted, so a malformed
// request gets codes.InvalidArgument and records nothing.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	w := scratches.Get().(*scratch)
	defer w.release()
	var checks []check
	var err error
	compat := s.deps.Compat != nil
	if set := s.deps.Files(); set != nil && set.Has(req.GetDomain()) {
		checks, err = translateFiles(req, set, s.deps.Policy, s.deps.Checker.PolicyFor, s.deps.Prepare, compat, w.checks)
	} else {
		checks, err = translate(req, s.deps.Mappings(), s.deps.Policy, s.deps.Checker.PolicyFor, s.deps.Prepare, compat, w.checks)
	}
	w.checks = checks
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	for _, c := range checks {
		if c.orphan != "" {
			s.deps.Log.Warn("envoy descriptor maps to a policy that is not configured; answered as unmapped",
				"domain", req.GetDomain(), "policy", c.orphan)
		}
	}
	outcomes := s.decide(ctx, checks, w.outs)
	w.outs = outcomes
	for i, o := range outcomes {
		switch {
		case o.err == nil, o.failedOpen:
			continue
		case errors.Is(o.err, limiter.ErrInvalidKey), errors.Is(o.err, limiter.ErrInvalidCost):
			// translate rules these out; a limiter with stricter rules still
			// gets the caller's fault reported as such.
			return nil, status.Errorf(codes.InvalidArgument, "descriptors[%d]: %v", i, o.err)
		default:
			return nil, status.Error(codes.Unavailable, "the limiter could not reach Redis in time; try again shortly")
		}
	}
	if s.deps.Stats != nil {
		for _, o := range outcomes {
			if o.c.stat.Key != "" && (o.decided || o.never) {
				s.deps.Stats(o.c.stat, hitsOfOutcome(o, s.deps.NearLimitRatio))
			}
		}
	}
	if compat {
		return compatRespond(outcomes, s.deps.Compat, s.deps.Shadow), nil
	}
	return respond(outcomes, (*httplimit.Policy).Fields, s.deps.Shadow), nil
}

// scratch is one call's working memory, reused from call to call, so a
// flood of calls answered by the local deny cache allocates little beyond
// its answers. Nothing of it outlives the call: the answer copies what it
// shows.
type scratch struct {
	checks []check
	outs   []outcome
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// release drops what the call referenced and returns w to the pool.
func (w *scratch) release() {
	clear(w.checks[:cap(w.checks)])
	clear(w.outs[:cap(w.outs)])
	w.checks, w.outs = w.checks[:0], w.outs[:0]
	scratches.Put(w)
}

// sized returns buf resized to n zero elements, reusing its memory when it
// is large enough.
func sized[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	buf = buf[:n]
	clear(buf)
	return buf
}

// outcome is what became of check c: a decision under p, an error
// (failedOpen: answered by the fail mode), a cost p can never take (never),
// or none of them when no policy applies.
type outcome struct {
	c          check
	decided    bool
	p          *httplimit.Policy
	d          limiter.Decision
	err        error
	failedOpen bool
	never      bool
}

// overridden reports an outcome decided under an operator's override of
// its policy (httplimit.Policy.Override): the answer describes the
// override's rules, not a file's limit.
func (o outcome) overridden() bool { return o.p != nil && o.p.Override() != "" }

// decide runs the mapped checks, concurrently when there are several (the
// limiter pipelines concurrent calls into one round trip), into buf's
// memory. A panic in one of them is raised again here, on the handler's
// goroutine, where the server's interceptor turns it into codes.Internal.
func (s *Service) decide(ctx context.Context, checks []check, buf []outcome) []outcome {
	out := sized(buf, len(checks))
	mapped := 0
	for i, c := range checks {
		out[i] = outcome{c: c, p: c.policy, never: c.mapped() && c.never}
		if c.asks() {
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

// allow decides one mapped descriptor through the Checker, as the HTTP
// check is decided.
func (s *Service) allow(ctx context.Context, c check) outcome {
	res := s.deps.Checker.Check(ctx, httplimit.Target{Key: c.key, Policy: c.policy, Cost: c.cost, Peek: c.peek})
	if res.Err != nil {
		return outcome{c: c, err: res.Err, failedOpen: res.FailedOpen()}
	}
	return outcome{c: c, decided: true, p: res.Policy, d: res.Decision}
}
