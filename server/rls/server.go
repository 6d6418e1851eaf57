package rls

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// ServiceName is the gRPC service this package serves, as reflection and
// health checks name it.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Server is the gRPC listener of --grpc-addr: the rate limit service, gRPC
// health (grpc.health.v1) and reflection, so grpcurl and grpc_health_probe
// work against it.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
}

// streamWorkers is how many calls run on workers at once: more than the
// calls in flight of a busy instance (a proxy fleet's sidecars), at a few KB
// of stack each while idle.
const streamWorkers = 256

// NewServer registers health and reflection on a new grpc.Server; Register
// adds the rate limit service before Serve. The two steps let health follow
// Redis (SetServing) from before the service exists. A panic in a handler
// becomes codes.Internal and an error line in log (nil: discarded) instead
// of the end of the process. opts are passed to grpc.NewServer.
func NewServer(log *slog.Logger, opts ...grpc.ServerOption) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Calls run on long-lived workers, whose stacks have grown to what a
	// call needs, rather than each on a new goroutine that grows its stack
	// (copying it) a few times per call: a fifth of the service's CPU under
	// load. Calls beyond the workers still get a goroutine each.
	opts = append([]grpc.ServerOption{grpc.NumStreamWorkers(streamWorkers)}, opts...)
	opts = append(opts, grpc.ChainUnaryInterceptor(recoverPanics(log)))
	s := &Server{grpc: grpc.NewServer(opts...), health: health.NewServer()}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.SetServing(true)
	return s
}

// Register serves svc; call it once, before Serve.
func (s *Server) Register(svc *Service) { rlsv3.RegisterRateLimitServiceServer(s.grpc, svc) }

// SetServing sets what health checks answer, for the server as a whole ("")
// and for ServiceName: SERVING or NOT_SERVING. The server may report Redis
// being unreachable this way, as /readyz does.
func (s *Server) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(ServiceName, st)
}

// Serve accepts connections on ln until Stop; it returns nil after Stop.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.grpc.Serve(ln); err != nil {
		return fmt.Errorf("failed to serve gRPC: %w", err)
	}
	return nil
}

// Stop stops gracefully: health checks turn NOT_SERVING, no new calls are
// accepted, and calls in flight finish. When ctx ends first, the remaining
// calls are cancelled and their connections closed.
func (s *Server) Stop(ctx context.Context) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
}

// recoverPanics turns a handler's panic into codes.Internal.
func recoverPanics(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("gRPC handler panicked", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(ctx, req)
	}
}
