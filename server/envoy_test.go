package server_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/server"
	"github.com/ratescope/ratescope/server/rls"
)

const envoyConfig = `
policies:
  - name: login
    rules: ["2/1m"]
  - name: api
    rules: ["5/1m"]
envoy:
  - domain: edge
    descriptors:
      - keys: [remote_address]
        policy: login
`

// grpcConn dials app's Envoy rate limit service.
func grpcConn(t testing.TB, app *apptest.App) *grpc.ClientConn {
	t.Helper()
	if app.GRPCAddr == "" {
		t.Fatalf("the server logged no gRPC address:\n%s", app.Logs())
	}
	conn, err := grpc.NewClient("passthrough:///"+app.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// shouldRateLimit asks about one descriptor of domain edge, key=value.
func shouldRateLimit(t testing.TB, c rlsv3.RateLimitServiceClient, key, value string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, envoyRequest(key, value))
	if err != nil {
		t.Fatalf("ShouldRateLimit %s=%s: %v", key, value, err)
	}
	return resp
}

func envoyRequest(key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
	}}}
}

// TestEnvoyDecisionsAreChecks: a ShouldRateLimit decision is an ordinary
// check: it reaches a viewer of its window as a decision message and is
// counted in ratescope_decisions_total and the check duration, as an HTTP
// check is.
func TestEnvoyDecisionsAreChecks(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, envoyConfig), "--grpc-addr", "127.0.0.1:0")
	if !strings.Contains(app.Logs(), "envoy rate limit service listening") {
		t.Fatalf("no listening line:\n%s", app.Logs())
	}
	c := rlsv3.NewRateLimitServiceClient(grpcConn(t, app))
	key := newKey()
	v := watch(t, app, "policy=login&key="+key, nil)
	v.next("snapshot", nil)

	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp := shouldRateLimit(t, c, "remote_address", key)
		if resp.GetOverallCode() != want {
			t.Fatalf("call %d: %v, want %v", i+1, resp.GetOverallCode(), want)
		}
		m := v.next("decision", nil)
		if m["key"] != key || m["policy"] != "login" || m["allowed"] != (want == rlsv3.RateLimitResponse_OK) || m["count"] != float64(min(i+1, 2)) {
			t.Fatalf("call %d reached the viewer as %v", i+1, m)
		}
	}
	m := metrics(t, app)
	for _, line := range []string{
		`ratescope_decisions_total{outcome="allowed",policy="login"} 2`,
		`ratescope_decisions_total{outcome="denied",policy="login"} 1`,
		`ratescope_check_duration_seconds_count 3`,
		`ratescope_checks_in_flight 0`,
	} {
		if !strings.Contains(m, line) {
			t.Errorf("/metrics lacks %q:\n%s", line, grepLines(m, "ratescope_"))
		}
	}
}

// TestEnvoyMappingReloads: a config edit that maps a new descriptor applies
// to the running gRPC service, with no restart.
func TestEnvoyMappingReloads(t *testing.T) {
	path := writeConfig(t, envoyConfig)
	app := startApp(t, nil, "--config", path, "--grpc-addr", "127.0.0.1:0")
	c := rlsv3.NewRateLimitServiceClient(grpcConn(t, app))
	user := newKey()
	if st := shouldRateLimit(t, c, "user", user).GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil {
		t.Fatalf("an unmapped descriptor: %v, want OK with no limit", st)
	}
	v1 := version(t, app)
	replaceFile(t, path, envoyConfig+`      - keys: [user]
        policy: api
`)
	waitFor(t, 5*time.Second, "the edited config applied", func() bool { return version(t, app) != v1 })
	st := shouldRateLimit(t, c, "user", user).GetStatuses()[0]
	if l := st.GetCurrentLimit(); l.GetName() != "api" || l.GetRequestsPerUnit() != 5 || st.GetLimitRemaining() != 4 {
		t.Fatalf("after the reload the descriptor got %v, want policy api with 4 remaining", st)
	}
}

// TestEnvoyHealthFollowsRedis: gRPC health is NOT_SERVING while Redis does
// not answer (fail mode closed), and SERVING again when it is back.
func TestEnvoyHealthFollowsRedis(t *testing.T) {
	rs := redistest.StartProxy(t, redistest.URL(t))
	app := startApp(t, map[string]string{"REDIS_URL": rs.URL}, "--grpc-addr", "127.0.0.1:0",
		"--check-timeout", "200ms", "--tick-interval", "50ms")
	hc := healthpb.NewHealthClient(grpcConn(t, app))
	health := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health %q: %v", service, err)
		}
		return r.GetStatus()
	}
	both := func(want healthpb.HealthCheckResponse_ServingStatus) func() bool {
		return func() bool { return health("") == want && health(rls.ServiceName) == want }
	}
	if !both(healthpb.HealthCheckResponse_SERVING)() {
		t.Fatalf("health before any fault: %v", health(""))
	}
	rs.Pause()
	waitFor(t, 15*time.Second, "NOT_SERVING while Redis is paused", both(healthpb.HealthCheckResponse_NOT_SERVING))
	rs.Resume()
	waitFor(t, 15*time.Second, "SERVING once Redis is back", both(healthpb.HealthCheckResponse_SERVING))
}

// TestEnvoyStopsGracefully: a call in flight when the app is told to stop
// (here, one waiting on a Redis that stopped answering) still gets the
// service's answer; then the gRPC listener is gone.
func TestEnvoyStopsGracefully(t *testing.T) {
	rs := redistest.StartProxy(t, redistest.URL(t))
	app := startApp(t, map[string]string{"REDIS_URL": rs.URL}, "--config", writeConfig(t, envoyConfig),
		"--grpc-addr", "127.0.0.1:0", "--check-timeout", "1s")
	c := rlsv3.NewRateLimitServiceClient(grpcConn(t, app))
	key := newKey()
	shouldRateLimit(t, c, "remote_address", key)
	rs.Pause()
	defer rs.Resume()
	got := make(chan error, 1)
	go func() {
		_, err := c.ShouldRateLimit(context.Background(), envoyRequest("remote_address", key))
		got <- err
	}()
	waitFor(t, 10*time.Second, "the call waits on Redis", func() bool {
		return strings.Contains(metrics(t, app), "ratescope_checks_in_flight 1")
	})
	if err := app.Stop(); err != nil {
		t.Fatal(err)
	}
	// Fail mode closed: the service's own answer, not a dropped connection.
	if err := <-got; status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "could not reach Redis") {
		t.Fatalf("in-flight call: %v, want the service's Unavailable answer", err)
	}
	after := rlsv3.NewRateLimitServiceClient(grpcConn(t, app))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := after.ShouldRateLimit(ctx, envoyRequest("remote_address", key)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a call after the stop: %v, want the listener gone", err)
	}
}

// TestEnvoyBadAddr: a --grpc-addr that cannot be listened on stops start-up
// with an error naming it.
func TestEnvoyBadAddr(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	env := map[string]string{"REDIS_URL": redistest.URL(t)}
	for _, addr := range []string{taken.Addr().String(), "no-port"} {
		args := []string{"ratescope", "--addr", "127.0.0.1:0", "--grpc-addr", addr}
		err := server.Run(context.Background(), args, func(k string) string { return env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--grpc-addr") || !strings.Contains(err.Error(), addr) {
			t.Errorf("--grpc-addr %s: err = %v, want it to name the flag and the address", addr, err)
		}
	}
}

// TestEnvoyHealthFailOpen: with the fail mode open every call is answered
// while Redis is down, so health stays SERVING, as /readyz stays 200.
func TestEnvoyHealthFailOpen(t *testing.T) {
	rs := redistest.StartProxy(t, redistest.URL(t))
	app := startApp(t, map[string]string{"REDIS_URL": rs.URL}, "--grpc-addr", "127.0.0.1:0",
		"--check-timeout", "200ms", "--tick-interval", "50ms", "--fail-mode", "open")
	hc := healthpb.NewHealthClient(grpcConn(t, app))
	rs.Pause()
	defer rs.Resume()
	waitFor(t, 15*time.Second, "readiness finds Redis down", func() bool {
		return do(t, "GET", app.URL+"/readyz", "").body["redis"] == "down"
	})
	time.Sleep(100 * time.Millisecond) // a wrong NOT_SERVING would follow at once
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: rls.ServiceName})
	if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health with Redis down and fail mode open: %v %v, want SERVING", r.GetStatus(), err)
	}
}
