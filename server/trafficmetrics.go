package server

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unmatchedRoute labels requests no route matched (404s of unknown paths),
// so a scan of random paths adds one series, not one per path.
const unmatchedRoute = "unmatched"

// routeSeries are one label value's series, resolved once: its duration
// histogram (when it has one) and, per status code, its request counter —
// made on a code's first request — so a request allocates nothing for its
// labels.
type routeSeries struct {
	label    string
	vec      *prometheus.CounterVec
	duration prometheus.Observer
	codes    [600]atomic.Pointer[counterRef] // by status code (HTTP) or gRPC code
}

type counterRef struct{ prometheus.Counter }

func newRouteSeries(vec *prometheus.CounterVec, durations *prometheus.HistogramVec, label string) *routeSeries {
	s := &routeSeries{label: label, vec: vec}
	if durations != nil {
		s.duration = durations.WithLabelValues(label)
	}
	return s
}

// count adds one request answered with code.
func (s *routeSeries) count(code int, name func(int) string) {
	if code < 0 || code >= len(s.codes) {
		s.vec.WithLabelValues(s.label, name(code)).Inc()
		return
	}
	c := s.codes[code].Load()
	if c == nil {
		c = &counterRef{s.vec.WithLabelValues(s.label, name(code))}
		s.codes[code].Store(c) // a racing first request stores the same child
	}
	c.Inc()
}

// httpMetrics counts and times every HTTP request by the Echo route that
// answered it (its pattern, never the raw path: bounded labels) and the
// status the client received.
type httpMetrics struct {
	m      *metrics
	routes map[string]*routeSeries // by route pattern; built once, read only
}

// prepare resolves each route's series before any request, with a zero count
// for the code it answers when all goes well, so dashboards see every route
// from the start.
func (h *httpMetrics) prepare(routes []*echo.Route) {
	h.routes = map[string]*routeSeries{}
	for _, path := range append([]string{unmatchedRoute}, routePaths(routes)...) {
		h.routes[path] = newRouteSeries(h.m.httpRequests, h.m.httpDuration, path)
	}
	for _, r := range routes {
		h.m.httpRequests.WithLabelValues(r.Path, strconv.Itoa(usualStatus(r)))
	}
}

func routePaths(routes []*echo.Route) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range routes {
		if !seen[r.Path] {
			seen[r.Path] = true
			out = append(out, r.Path)
		}
	}
	return out
}

// usualStatus is what a route answers when all goes well.
func usualStatus(r *echo.Route) int {
	switch {
	case r.Path == "/ws" || r.Path == "/ws/lab":
		return 101
	case r.Method == "DELETE" && strings.HasPrefix(r.Path, "/api/"):
		return 204
	}
	return 200
}

// middleware is the outermost: it sees the status the error handler wrote.
// A stream's duration is how long it was open.
func (h *httpMetrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		s := h.routes[c.Path()]
		if s == nil {
			s = h.routes[unmatchedRoute]
		}
		s.duration.Observe(time.Since(start).Seconds())
		s.count(c.Response().Status, strconv.Itoa)
		return nil
	}
}

// grpcMethods are the gRPC methods ratescope serves unary; any other is
// counted too, resolving its labels per call.
var grpcMethods = []string{
	"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
	"/grpc.health.v1.Health/Check",
}

// grpcMetrics counts every gRPC call by method and status code.
type grpcMetrics struct {
	m       *metrics
	methods map[string]*routeSeries
}

func newGRPCMetrics(m *metrics) *grpcMetrics {
	g := &grpcMetrics{m: m, methods: map[string]*routeSeries{}}
	for _, method := range grpcMethods {
		g.methods[method] = newRouteSeries(m.grpcRequests, nil, method)
		m.grpcRequests.WithLabelValues(method, codes.OK.String())
	}
	return g
}

func (g *grpcMetrics) count(method string, err error) {
	code := int(status.Code(err))
	if s := g.methods[method]; s != nil {
		s.count(code, grpcCodeName)
		return
	}
	g.m.grpcRequests.WithLabelValues(method, grpcCodeName(code)).Inc()
}

func grpcCodeName(code int) string { return codes.Code(code).String() }

// options are the interceptors to pass to the gRPC server.
func (g *grpcMetrics) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			resp, err := next(ctx, req)
			g.count(info.FullMethod, err)
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
			err := next(srv, ss)
			g.count(info.FullMethod, err)
			return err
		}),
	}
}
