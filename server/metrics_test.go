package server_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratescope/ratescope/internal/redistest"
)

// documentedMetrics are the metric names in the operations page's table.
func documentedMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(ratescope_[a-z_]+)[{`]").FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	if len(names) < 15 {
		t.Fatalf("found %d metrics in docs/operations.md's table", len(names))
	}
	return names
}

// missingMetrics lists the names that have no series in a Prometheus text
// exposition (a family without series prints no # TYPE line).
func missingMetrics(names []string, exposition string) []string {
	var missing []string
	for _, n := range names {
		if !strings.Contains(exposition, "\n# TYPE "+n+" ") {
			missing = append(missing, n)
		}
	}
	return missing
}

// TestMetricsFromTheStart: a fresh instance, before any traffic, exports
// every metric the docs list, with series at zero for what has not happened
// yet (fail-open answers, Redis errors, gRPC calls), and its help texts cite
// nothing a reader does not have.
func TestMetricsFromTheStart(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_GRPC_ADDR": "127.0.0.1:0"}, "--policy", "jobs=2/inflight")
	m := metrics(t, app)
	if missing := missingMetrics(documentedMetrics(t), m); len(missing) > 0 {
		t.Errorf("a fresh instance lacks %v", missing)
	}
	for _, want := range []string{
		`ratescope_fail_open_total{policy="demo"} 0`,
		`ratescope_redis_errors_total{op="check"} 0`,
		`ratescope_redis_errors_total{op="refund"} 0`,
		`ratescope_leases_held{policy="jobs"} 0`,
		`ratescope_leases_total{event="expired",policy="jobs"} 0`,
		`ratescope_redis_errors_total{op="settle"} 0`,
		`ratescope_adjustments_total{kind="refund",policy="demo"} 0`,
		`ratescope_adjustments_total{kind="settle",policy="default"} 0`,
		`ratescope_http_requests_total{code="200",route="/api/v1/refund"} 0`,
		`ratescope_http_requests_total{code="200",route="/api/v1/check"} 0`,
		`ratescope_http_requests_total{code="204",route="/api/v1/window"} 0`,
		`ratescope_http_request_duration_seconds_count{route="/api/v1/check"} 0`,
		`ratescope_grpc_requests_total{code="OK",method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} 0`,
		`ratescope_redis_up 1`,
		`ratescope_config_last_reload_successful 1`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("a fresh instance lacks %s", want)
		}
	}
	if !regexp.MustCompile(`ratescope_build_info\{commit="[^"]+",goversion="go1\.[^"]+",version="[^"]+"\} 1`).MatchString(m) {
		t.Errorf("no build info: %s", grepLines(m, "build_info"))
	}
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "# HELP ratescope_") && (strings.Contains(line, "SPEC") || strings.Contains(line, "§")) {
			t.Errorf("a help text cites a contract: %s", line)
		}
	}
}

// TestMissingMetricsFound: the check above fails when a documented metric
// has no series.
func TestMissingMetricsFound(t *testing.T) {
	exposition := "# HELP ratescope_a_total A.\n# TYPE ratescope_a_total counter\nratescope_a_total 0\n"
	if got := missingMetrics([]string{"ratescope_a_total", "ratescope_b_total"}, exposition); len(got) != 1 || got[0] != "ratescope_b_total" {
		t.Errorf("missingMetrics = %v, want [ratescope_b_total]", got)
	}
}

// TestHTTPMetricsByRoute: requests are counted by route pattern and the
// status the client received — errors written by the error handler
// included — and paths no route serves share one label.
func TestHTTPMetricsByRoute(t *testing.T) {
	app := startApp(t, nil)
	do(t, "POST", app.URL+"/api/v1/check?key=m1&policy=demo", "")
	do(t, "POST", app.URL+"/api/v1/check?key=bad%20key&policy=demo", "")
	do(t, "PUT", app.URL+"/api/v1/check", "")
	for i := range 3 {
		do(t, "GET", app.URL+"/no/such/path/"+string(rune('a'+i)), "")
	}
	do(t, "POST", app.URL+"/forward-auth/some/path", "")
	m := metrics(t, app)
	for _, want := range []string{
		`ratescope_http_requests_total{code="200",route="/api/v1/check"} 1`,
		`ratescope_http_requests_total{code="400",route="/api/v1/check"} 1`,
		`ratescope_http_requests_total{code="405",route="/api/v1/check"} 1`,
		`ratescope_http_requests_total{code="404",route="unmatched"} 3`,
		`ratescope_http_requests_total{code="200",route="/forward-auth/*"} 1`,
		`ratescope_http_request_duration_seconds_count{route="/api/v1/check"} 3`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "ratescope_http_requests_total"))
		}
	}
	if strings.Contains(m, "/no/such") || strings.Contains(m, "some/path") {
		t.Errorf("a raw path became a label:\n%s", grepLines(m, "route="))
	}
}

// TestGRPCMetrics: gRPC calls are counted by method and status code.
func TestGRPCMetrics(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_GRPC_ADDR": "127.0.0.1:0"}, "--config", writeConfig(t, envoyConfig))
	c := rlsv3.NewRateLimitServiceClient(grpcConn(t, app))
	shouldRateLimit(t, c, "remote_address", "10.0.0.9")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an empty request: %v, want InvalidArgument", err)
	}
	m := metrics(t, app)
	for _, want := range []string{
		`ratescope_grpc_requests_total{code="OK",method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} 1`,
		`ratescope_grpc_requests_total{code="InvalidArgument",method="/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} 1`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "grpc_requests"))
		}
	}
}

// TestRedisUpMetric: ratescope_redis_up follows readiness — 0 while Redis
// does not answer, 1 again once it does.
func TestRedisUpMetric(t *testing.T) {
	proxy := redistest.StartProxy(t, redistest.URL(t))
	app := startApp(t, map[string]string{"REDIS_URL": proxy.URL, "RATESCOPE_CHECK_TIMEOUT": "200ms"})
	waitFor(t, 10*time.Second, "redis_up 1", func() bool { return strings.Contains(metrics(t, app), "\nratescope_redis_up 1\n") })
	proxy.Pause()
	waitFor(t, 10*time.Second, "redis_up 0 while Redis hangs", func() bool { return strings.Contains(metrics(t, app), "\nratescope_redis_up 0\n") })
	proxy.Resume()
	waitFor(t, 10*time.Second, "redis_up 1 again", func() bool { return strings.Contains(metrics(t, app), "\nratescope_redis_up 1\n") })
}
