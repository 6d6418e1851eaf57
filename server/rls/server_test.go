package rls_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/rls"
)

// TestReflectionListsTheService the way grpcurl does: list the services,
// then fetch the file that defines ShouldRateLimit.
func TestReflectionListsTheService(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	list := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	var names []string
	for _, s := range list.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{rls.ServiceName, "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, not %s", names, want)
		}
	}
	file := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{
		FileContainingSymbol: rls.ServiceName,
	}})
	raw := file.GetFileDescriptorResponse().GetFileDescriptorProto()
	if len(raw) == 0 {
		t.Fatalf("no file descriptor for %s: %v", rls.ServiceName, file)
	}
	var fd descriptorpb.FileDescriptorProto
	if err := proto.Unmarshal(raw[0], &fd); err != nil {
		t.Fatal(err)
	}
	if fd.GetPackage() != "envoy.service.ratelimit.v3" || len(fd.GetService()) == 0 ||
		fd.GetService()[0].GetMethod()[0].GetName() != "ShouldRateLimit" {
		t.Errorf("file %s (package %s) does not define ShouldRateLimit", fd.GetName(), fd.GetPackage())
	}
}

// TestHealth answers SERVING for the server and the service, and
// NOT_SERVING when told (e.g. Redis unreachable).
func TestHealth(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	client := healthpb.NewHealthClient(h.conn)
	check := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	for _, s := range []string{"", rls.ServiceName} {
		if got := check(s); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, want SERVING", s, got)
		}
	}
	h.srv.SetServing(false)
	if got := check(""); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after SetServing(false): %v, want NOT_SERVING", got)
	}
}

// gate is a Decider that holds each call on a key starting with "hold"
// until it is opened or the call's context ends; it passes every call on to
// the real limiter.
type gate struct {
	lim     httplimit.Decider
	entered chan struct{}
	open    chan struct{}
}

func (g *gate) AllowWithin(ctx context.Context, w limiter.Within, key string, p limiter.Policy, cost int) (limiter.Decision, error) {
	if strings.HasPrefix(key, "hold") {
		g.entered <- struct{}{}
		select {
		case <-g.open:
		case <-ctx.Done():
			return limiter.Decision{}, ctx.Err()
		}
	}
	return g.lim.AllowWithin(ctx, w, key, p, cost)
}

func (g *gate) PeekWithin(ctx context.Context, w limiter.Within, key string, p limiter.Policy, cost int) (limiter.Decision, error) {
	return g.lim.PeekWithin(ctx, w, key, p, cost)
}

// TestGracefulStop: Stop lets a call in flight finish, refuses new ones, and
// makes Serve return nil.
func TestGracefulStop(t *testing.T) {
	g := &gate{entered: make(chan struct{}, 1), open: make(chan struct{})}
	h := serve(t, redistest.URL(t), func(d *rls.Deps) { g.lim = d.Checker.Limiter; d.Checker.Limiter = g })
	answer := make(chan error, 1)
	go func() {
		resp, err := h.client.ShouldRateLimit(context.Background(), request(0, "remote_address=hold-"+newValue()))
		if err == nil && resp.GetOverallCode() != ok {
			t.Errorf("the call in flight got %v, want OK", resp.GetOverallCode())
		}
		answer <- err
	}()
	<-g.entered
	stopped := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
		defer cancel()
		h.srv.Stop(ctx)
		close(stopped)
	}()

	// New calls are refused while the old one runs.
	deadline := time.Now().Add(testTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		_, err := rlsv3.NewRateLimitServiceClient(dial(t, h.addr)).ShouldRateLimit(ctx, request(0, "remote_address="+newValue()))
		cancel()
		if status.Code(err) == codes.Unavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new call during the stop got %v, want Unavailable", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-stopped:
		t.Fatal("Stop returned while a call was in flight")
	default:
	}
	close(g.open)
	if err := <-answer; err != nil {
		t.Fatalf("the call in flight failed: %v", err)
	}
	<-stopped
	if err := <-h.served; err != nil {
		t.Errorf("Serve returned %v after Stop, want nil", err)
	}
}

// TestStopDeadline: when the calls in flight outlast Stop's context, Stop
// cancels them and returns.
func TestStopDeadline(t *testing.T) {
	g := &gate{entered: make(chan struct{}, 1), open: make(chan struct{})}
	h := serve(t, redistest.URL(t), func(d *rls.Deps) { g.lim = d.Checker.Limiter; d.Checker.Limiter = g })
	answer := make(chan error, 1)
	go func() {
		_, err := h.client.ShouldRateLimit(context.Background(), request(0, "remote_address=hold-"+newValue()))
		answer <- err
	}()
	<-g.entered
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	h.srv.Stop(ctx)
	if took := time.Since(start); took > testTimeout {
		t.Errorf("Stop took %v", took)
	}
	if err := <-answer; status.Code(err) != codes.Unavailable {
		t.Errorf("the cut-off call got %v, want Unavailable", err)
	}
}

// panicker is a Decider with a bug.
type panicker struct{}

func (panicker) AllowWithin(context.Context, limiter.Within, string, limiter.Policy, int) (limiter.Decision, error) {
	panic("a bug")
}

func (panicker) PeekWithin(context.Context, limiter.Within, string, limiter.Policy, int) (limiter.Decision, error) {
	panic("a bug")
}

// TestPanicIsInternal: a panic in a call is that call's Internal error, not
// the end of the process.
func TestPanicIsInternal(t *testing.T) {
	h := serve(t, redistest.URL(t), func(d *rls.Deps) { d.Checker.Limiter = panicker{} })
	// One descriptor is decided on the handler's goroutine, several on
	// goroutines of their own.
	for _, req := range []*rlsv3.RateLimitRequest{
		request(0, "remote_address="+newValue()),
		request(0, "remote_address="+newValue(), "generic_key=x"),
		request(0, "remote_address="+newValue()),
	} {
		_, err := h.client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.Internal {
			t.Fatalf("got %v, want Internal", err)
		}
	}
}
