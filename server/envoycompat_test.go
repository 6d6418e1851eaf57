package server_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratescope/ratescope/internal/redistest"
)

// The compat table: requests and the answers envoyproxy/ratelimit gives them
// for testdata/envoy/compat, written from its documentation and source (its
// README's "Configuration", src/service/ratelimit.go, src/limiter). With
// --envoy-compat ratescope must give the same answers, proto.Equal.
//
// The table can be checked against envoyproxy/ratelimit itself: build it
// (go build -o envoy-rl ./src/service_cmd in its checkout) and run
//
//	RATESCOPE_TEST_ENVOY_RL_BIN=/path/to/envoy-rl go test ./server -run EnvoyCompat
//
// which plays the same table against it too, on a redis-server of its own.

// Units as Envoy spells them.
const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
)

var (
	codeOK   = rlsv3.RateLimitResponse_OK
	codeOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

// unitSeconds is a unit's length in envoyproxy/ratelimit's terms.
var unitSeconds = map[rlsv3.RateLimitResponse_RateLimit_Unit]int64{second: 1, minute: 60, hour: 3600, day: 86400}

// desc builds a descriptor of "key=value" entries.
func desc(entries ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// hits sets a descriptor's own hits_addend.
func hits(n uint64, d *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// override sets a descriptor's limit override.
func override(rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, d *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit(unit)}
	return d
}

// answer is one status as envoyproxy/ratelimit builds it, at a moment:
// duration_until_reset counts down to the end of the unit's window.
type answer func(now int64) *rlsv3.RateLimitResponse_DescriptorStatus

func limited(code rlsv3.RateLimitResponse_Code, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, name string, remaining uint32) answer {
	return func(now int64) *rlsv3.RateLimitResponse_DescriptorStatus {
		s := unitSeconds[unit]
		return &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:               code,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: rpu, Unit: unit},
			LimitRemaining:     remaining,
			DurationUntilReset: &durationpb.Duration{Seconds: s - now%s},
		}
	}
}

// noLimit is a descriptor no limit applies to; unlimited one whose limit is
// unlimited: true.
func noLimit(int64) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: codeOK}
}

func unlimited(int64) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: codeOK, LimitRemaining: math.MaxUint32}
}

// compatStep is one call and its answer: the overall code, a status per
// descriptor and, when the answer carries them, the RateLimit-Limit,
// -Remaining and -Reset headers of the descriptor they describe (by unit).
type compatStep struct {
	name        string
	descriptors []*ratelimitv3.RateLimitDescriptor
	hitsAddend  uint32 // the request's
	overall     rlsv3.RateLimitResponse_Code
	statuses    []answer
	headers     *compatHeaders
}

type compatHeaders struct {
	limit, remaining uint32
	unit             rlsv3.RateLimitResponse_RateLimit_Unit
}

func (s compatStep) request(domain string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: s.descriptors, HitsAddend: s.hitsAddend}
}

func (s compatStep) response(now int64) *rlsv3.RateLimitResponse {
	r := &rlsv3.RateLimitResponse{OverallCode: s.overall}
	for _, a := range s.statuses {
		r.Statuses = append(r.Statuses, a(now))
	}
	if h := s.headers; h != nil {
		sec := unitSeconds[h.unit]
		r.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(h.limit), 10)},
			{Key: "RateLimit-Remaining", Value: strconv.FormatUint(uint64(h.remaining), 10)},
			{Key: "RateLimit-Reset", Value: strconv.FormatInt(sec-now%sec, 10)},
		}
	}
	return r
}

// compatTable is the table for the default environment, in order: its
// steps share windows.
var compatTable = []compatStep{
	{name: "a key alone", descriptors: ds(desc("user=a")), overall: codeOK,
		statuses: as(limited(codeOK, 3, hour, "", 2))},
	{name: "the second", descriptors: ds(desc("user=a")), overall: codeOK, statuses: as(limited(codeOK, 3, hour, "", 1))},
	{name: "the last", descriptors: ds(desc("user=a")), overall: codeOK, statuses: as(limited(codeOK, 3, hour, "", 0))},
	{name: "over the limit", descriptors: ds(desc("user=a")), overall: codeOver, statuses: as(limited(codeOver, 3, hour, "", 0))},
	{name: "a peek past the limit is over", descriptors: ds(hits(0, desc("user=a"))), overall: codeOver, statuses: as(limited(codeOver, 3, hour, "", 0))},
	{name: "a cost at the limit", descriptors: ds(hits(3, desc("user=b"))), overall: codeOK, statuses: as(limited(codeOK, 3, hour, "", 0))},
	{name: "a peek at a full window is OK", descriptors: ds(hits(0, desc("user=b"))), overall: codeOK, statuses: as(limited(codeOK, 3, hour, "", 0))},
	{name: "a peek records nothing", descriptors: ds(hits(0, desc("user=c"))), overall: codeOK, statuses: as(limited(codeOK, 3, hour, "", 3))},
	{name: "the request's hits_addend", descriptors: ds(desc("user=c")), hitsAddend: 2, overall: codeOK, statuses: as(limited(codeOK, 3, hour, "", 1))},
	{name: "a cost above the limit", descriptors: ds(hits(5, desc("user=d"))), overall: codeOver, statuses: as(limited(codeOver, 3, hour, "", 0))},
	{name: "…is counted", descriptors: ds(desc("user=d")), overall: codeOver, statuses: as(limited(codeOver, 3, hour, "", 0))},
	{name: "a denied cost is counted", descriptors: ds(hits(2, desc("user=e"))), overall: codeOK, statuses: as(limited(codeOK, 3, hour, "", 1))},
	{name: "…past the limit", descriptors: ds(hits(2, desc("user=e"))), overall: codeOver, statuses: as(limited(codeOver, 3, hour, "", 0))},
	{name: "…so one more is over", descriptors: ds(desc("user=e")), overall: codeOver, statuses: as(limited(codeOver, 3, hour, "", 0))},
	{name: "unlimited", descriptors: ds(desc("user=vip")), overall: codeOK, statuses: as(unlimited)},
	{name: "a zero limit", descriptors: ds(desc("user=banned")), overall: codeOver, statuses: as(limited(codeOver, 0, hour, "", 0))},
	{name: "a wildcard, named", descriptors: ds(desc("path=/api/x")), overall: codeOK, statuses: as(limited(codeOK, 2, hour, "api", 1))},
	{name: "another path, its own window", descriptors: ds(desc("path=/api/y")), overall: codeOK, statuses: as(limited(codeOK, 2, hour, "api", 1))},
	{name: "a shared wildcard", descriptors: ds(desc("path=/files/a")), overall: codeOK, statuses: as(limited(codeOK, 2, hour, "", 1))},
	{name: "another file, the same window", descriptors: ds(desc("path=/files/b")), overall: codeOK, statuses: as(limited(codeOK, 2, hour, "", 0))},
	{name: "a third file is over", descriptors: ds(desc("path=/files/c")), overall: codeOver, statuses: as(limited(codeOver, 2, hour, "", 0))},
	{name: "nested", descriptors: ds(desc("tenant=t1", "user=u")), overall: codeOK, statuses: as(limited(codeOK, 2, hour, "tenant_user", 1))},
	{name: "shadow", descriptors: ds(desc("tenant=t1", "user=trial")), overall: codeOK, statuses: as(limited(codeOK, 1, hour, "", 0))},
	{name: "shadow over its limit is OK", descriptors: ds(desc("tenant=t1", "user=trial")), overall: codeOK, statuses: as(limited(codeOK, 1, hour, "", 0))},
	{name: "replaces", descriptors: ds(desc("tenant=t2", "user=u"), desc("plan=premium", "user=u")), overall: codeOK,
		statuses: as(noLimit, limited(codeOK, 5, hour, "", 4))},
	{name: "the replaced limit was not counted", descriptors: ds(desc("tenant=t2", "user=u")), overall: codeOK,
		statuses: as(limited(codeOK, 2, hour, "tenant_user", 1))},
	{name: "one over, one OK: over", descriptors: ds(desc("user=a"), desc("user=f")), overall: codeOver,
		statuses: as(limited(codeOver, 3, hour, "", 0), limited(codeOK, 3, hour, "", 2))},
	{name: "a quota descriptor", descriptors: ds(desc("quota=q1")), overall: codeOK, statuses: as(limited(codeOK, 1, hour, "", 0))},
	{name: "one quota over, one not: OK", descriptors: ds(desc("quota=q1"), desc("quota=q2")), overall: codeOK,
		statuses: as(limited(codeOver, 1, hour, "", 0), limited(codeOK, 1, hour, "", 0))},
	{name: "every quota over: over", descriptors: ds(desc("quota=q1"), desc("quota=q2")), overall: codeOver,
		statuses: as(limited(codeOver, 1, hour, "", 0), limited(codeOver, 1, hour, "", 0))},
	{name: "unknown key, deeper and shallower", descriptors: ds(desc("nobody=x"), desc("user=g", "more=1"), desc("tenant=t3")), overall: codeOK,
		statuses: as(noLimit, noLimit, noLimit)},
	{name: "a descriptor with no entries", descriptors: ds(desc()), overall: codeOK, statuses: as(noLimit)},
	{name: "per second", descriptors: ds(desc("per_second=x")), overall: codeOK, statuses: as(limited(codeOK, 100, second, "", 99))},
	{name: "per minute", descriptors: ds(desc("per_minute=x")), overall: codeOK, statuses: as(limited(codeOK, 100, minute, "", 99))},
	{name: "per day", descriptors: ds(desc("per_day=x")), overall: codeOK, statuses: as(limited(codeOK, 100, day, "", 99))},
	{name: "a limit override", descriptors: ds(override(10, minute, desc("user=h"))), overall: codeOK, statuses: as(limited(codeOK, 10, minute, "", 9))},
	{name: "an override shares the window of its unit", descriptors: ds(override(10, hour, desc("user=a"))), overall: codeOK, statuses: as(limited(codeOK, 10, hour, "", 4))},
	{name: "an override on no limit", descriptors: ds(override(1, hour, desc("nobody=y"))), overall: codeOK, statuses: as(limited(codeOK, 1, hour, "", 0))},
	{name: "an override on an unlimited value", descriptors: ds(override(1, hour, desc("user=vip"))), overall: codeOK, statuses: as(limited(codeOK, 1, hour, "", 0))},
	{name: "an override of zero", descriptors: ds(override(0, hour, desc("user=i"))), overall: codeOver, statuses: as(limited(codeOver, 0, hour, "", 0))},
}

// compatHeaderTable is played with SHADOW_MODE=true and
// LIMIT_RESPONSE_HEADERS_ENABLED=true: statuses as they are, overall OK,
// and the headers of the descriptor with the least remaining, or of the
// last one over its limit.
var compatHeaderTable = []compatStep{
	{name: "headers", descriptors: ds(desc("user=a")), overall: codeOK,
		statuses: as(limited(codeOK, 3, hour, "", 2)), headers: &compatHeaders{3, 2, hour}},
	{name: "the least remaining", descriptors: ds(desc("per_minute=y"), desc("user=a")), overall: codeOK,
		statuses: as(limited(codeOK, 100, minute, "", 99), limited(codeOK, 3, hour, "", 1)), headers: &compatHeaders{3, 1, hour}},
	{name: "no headers without a limit", descriptors: ds(desc("user=vip"), desc("nobody=z")), overall: codeOK,
		statuses: as(unlimited, noLimit)},
	{name: "over, but SHADOW_MODE", descriptors: ds(hits(2, desc("user=a"))), overall: codeOK,
		statuses: as(limited(codeOver, 3, hour, "", 0)), headers: &compatHeaders{3, 0, hour}},
	{name: "the last one over", descriptors: ds(desc("user=a"), desc("per_minute=y"), desc("user=banned")), overall: codeOK,
		statuses: as(limited(codeOver, 3, hour, "", 0), limited(codeOK, 100, minute, "", 98), limited(codeOver, 0, hour, "", 0)), headers: &compatHeaders{0, 0, hour}},
}

func ds(d ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor { return d }
func as(a ...answer) []answer                                                     { return a }

// playCompat plays table against the service at addr for domain: each
// answer must equal the table's, at the moment before or after the call.
func playCompat(t *testing.T, addr, domain string, table []compatStep) {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	// Counted steps share hour windows: start well before an hour's end.
	if left := 3600 - time.Now().Unix()%3600; left < 120 {
		t.Logf("waiting %d s for the hour to turn", left+1)
		time.Sleep(time.Duration(left+1) * time.Second)
	}
	for _, s := range table {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		before := time.Now().Unix()
		got, err := client.ShouldRateLimit(ctx, s.request(domain))
		after := time.Now().Unix()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !proto.Equal(got, s.response(before)) && !proto.Equal(got, s.response(after)) {
			t.Fatalf("%s:\n got %s\nwant %s", s.name, prototext.Format(got), prototext.Format(s.response(after)))
		}
	}
}

// compatFiles copies testdata/envoy/compat into dir with domains of their
// own (compat → compat-<run>, other → other-<run>), so windows shared by
// every value start empty on every run.
func compatFiles(t *testing.T, dir string) (domain string) {
	t.Helper()
	run := uuid.NewString()[:8]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"compat", "other"} {
		b, err := os.ReadFile(filepath.Join("testdata/envoy/compat", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.Replace(string(b), "domain: "+name+"\n", "domain: "+name+"-"+run+"\n", 1))
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return "compat-" + run
}

// TestEnvoyCompat plays the compat tables against ratescope --envoy-compat
// and, when RATESCOPE_TEST_ENVOY_RL_BIN names a build of it, against
// envoyproxy/ratelimit itself.
func TestEnvoyCompat(t *testing.T) {
	for _, c := range []struct {
		name  string
		env   map[string]string
		table []compatStep
	}{
		{"default", map[string]string{}, compatTable},
		{"headers and SHADOW_MODE", map[string]string{"SHADOW_MODE": "true", "LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, compatHeaderTable},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Run("ratescope", func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "config")
				domain := compatFiles(t, dir)
				env := map[string]string{"RATESCOPE_ENVOY_COMPAT": "true"}
				for k, v := range c.env {
					env[k] = v
				}
				app := startApp(t, env, "--envoy-config-dir", dir, "--grpc-addr", "127.0.0.1:0")
				playCompat(t, app.GRPCAddr, domain, c.table)
			})
			if bin := os.Getenv("RATESCOPE_TEST_ENVOY_RL_BIN"); bin != "" {
				t.Run("envoyproxy-ratelimit", func(t *testing.T) {
					root := t.TempDir()
					domain := compatFiles(t, filepath.Join(root, "ratelimit", "config"))
					addr := startEnvoyRL(t, bin, root, c.env)
					playCompat(t, addr, domain, c.table)
				})
			}
		})
	}
}

// startEnvoyRL runs envoyproxy/ratelimit's binary on the files under
// root/ratelimit/config, with a redis-server of its own, and returns its
// gRPC address.
func startEnvoyRL(t *testing.T, bin, root string, extra map[string]string) string {
	t.Helper()
	rs, err := redistest.Launch(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Stop)
	port := func() string {
		p, err := redistest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(p)
	}
	httpPort, grpcPort := port(), port()
	env := append(os.Environ(), "USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+rs.Addr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "PORT="+httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+port(), "LOG_LEVEL=warn")
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	cmd := exec.Command(bin)
	cmd.Env = env
	log, err := os.Create(filepath.Join(t.TempDir(), "envoy-rl.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); log.Close() })
	waitFor(t, 20*time.Second, "envoyproxy/ratelimit's /healthcheck", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%s/healthcheck", httpPort))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return "127.0.0.1:" + grpcPort
}
