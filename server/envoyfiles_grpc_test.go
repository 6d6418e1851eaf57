package server_test

import (
	"context"
	"math"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
)

// rlsCaller calls one domain of a running server's Envoy rate limit
// service.
type rlsCaller struct {
	t      *testing.T
	client rlsv3.RateLimitServiceClient
	domain string
}

func newRLSCaller(t *testing.T, addr, domain string) *rlsCaller {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rlsCaller{t: t, client: rlsv3.NewRateLimitServiceClient(conn), domain: domain}
}

func (c *rlsCaller) call(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: c.domain, Descriptors: ds})
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// expect checks one status: its code, its limit (name, requests per unit,
// unit) and remaining; retry says whether duration_until_reset is a wait
// (a denial Redis decided) or 0.
func expect(t *testing.T, what string, resp *rlsv3.RateLimitResponse, i int, code rlsv3.RateLimitResponse_Code, name string, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, retry bool) {
	t.Helper()
	st := resp.GetStatuses()[i]
	l := st.GetCurrentLimit()
	wait := st.GetDurationUntilReset().AsDuration()
	if st.GetCode() != code || l.GetName() != name || l.GetRequestsPerUnit() != rpu || l.GetUnit() != unit ||
		st.GetLimitRemaining() != remaining || (wait > 0) != retry || wait > time.Duration(unitSeconds[unit])*time.Second {
		t.Fatalf("%s: status %d is\n%s\nwant %s %q %d per %s, %d remaining, a wait: %v", what, i, prototext.Format(st), code, name, rpu, unit, remaining, retry)
	}
}

// TestEnvoyFilesAnswers plays envoyproxy/ratelimit's files (the compat
// fixtures) through a real gRPC client against ratescope's own answers:
// the same limits, matched as envoyproxy/ratelimit matches them, decided by
// the sliding-window log with exact waits, each limit a policy named for
// its path, each descriptor path and domain a window of its own.
func TestEnvoyFilesAnswers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	domain := compatFiles(t, dir)
	other := "other-" + strings.TrimPrefix(domain, "compat-")
	app := startApp(t, nil, "--envoy-config-dir", dir, "--grpc-addr", "127.0.0.1:0")
	c := newRLSCaller(t, app.GRPCAddr, domain)
	user := domain + ".user"

	// A key alone, then over: the exact wait, Retry-After, RateLimit fields.
	for i := uint32(0); i < 3; i++ {
		expect(t, "user=a", c.call(desc("user=a")), 0, codeOK, user, 3, hour, 2-i, false)
	}
	resp := c.call(desc("user=a"))
	expect(t, "user=a over", resp, 0, codeOver, user, 3, hour, 0, true)
	if h := headerMap(resp); h["Retry-After"] == "" || !strings.HasPrefix(h["RateLimit"], `"`+user+`";r=0;t=`) {
		t.Fatalf("headers %v", h)
	}
	// A peek: would one more pass? Nothing is recorded either way.
	expect(t, "peek past the limit", c.call(hits(0, desc("user=a"))), 0, codeOver, user, 3, hour, 0, true)
	expect(t, "peek", c.call(hits(0, desc("user=p"))), 0, codeOK, user, 3, hour, 3, false)
	expect(t, "after a peek", c.call(desc("user=p")), 0, codeOK, user, 3, hour, 2, false)
	// A cost the limit can never allow: over, nothing recorded.
	expect(t, "cost 5 of 3", c.call(hits(5, desc("user=c"))), 0, codeOver, user, 3, hour, 0, false)
	expect(t, "after cost 5", c.call(desc("user=c")), 0, codeOK, user, 3, hour, 2, false)
	// Unlimited, and a limit of 0.
	if st := c.call(desc("user=vip")).GetStatuses()[0]; st.GetCode() != codeOK || st.GetLimitRemaining() != math.MaxUint32 || st.GetCurrentLimit() != nil {
		t.Fatalf("unlimited: %v", st)
	}
	expect(t, "a zero limit", c.call(desc("user=banned")), 0, codeOver, domain+".user_banned", 0, hour, 0, false)
	// Wildcards: a window per path, or one shared by every path.
	expect(t, "/api/x", c.call(desc("path=/api/x")), 0, codeOK, domain+".path_/api/*", 2, hour, 1, false)
	expect(t, "/api/y", c.call(desc("path=/api/y")), 0, codeOK, domain+".path_/api/*", 2, hour, 1, false)
	expect(t, "/files/a", c.call(desc("path=/files/a")), 0, codeOK, domain+".path_/files/*", 2, hour, 1, false)
	expect(t, "/files/b", c.call(desc("path=/files/b")), 0, codeOK, domain+".path_/files/*", 2, hour, 0, false)
	expect(t, "/files/c", c.call(desc("path=/files/c")), 0, codeOver, domain+".path_/files/*", 2, hour, 0, true)
	// Nesting, and a shadow limit: its would-deny is OK with no wait.
	expect(t, "nested", c.call(desc("tenant=t1", "user=u")), 0, codeOK, domain+".tenant.user", 2, hour, 1, false)
	expect(t, "shadow", c.call(desc("tenant=t1", "user=trial")), 0, codeOK, domain+".tenant.user_trial", 1, hour, 0, false)
	resp = c.call(desc("tenant=t1", "user=trial"))
	expect(t, "shadow over", resp, 0, codeOK, domain+".tenant.user_trial", 1, hour, 0, false)
	if resp.GetOverallCode() != codeOK || headerMap(resp)["Retry-After"] != "" {
		t.Fatalf("a shadow would-deny: %v", resp)
	}
	// Replaces: the replaced limit is not decided, nor counted.
	resp = c.call(desc("tenant=t2", "user=u"), desc("plan=premium", "user=u"))
	if st := resp.GetStatuses()[0]; st.GetCurrentLimit() != nil || st.GetCode() != codeOK {
		t.Fatalf("the replaced limit: %v", st)
	}
	expect(t, "the replacing limit", resp, 1, codeOK, domain+".plan_premium.user", 5, hour, 4, false)
	expect(t, "the replaced limit alone", c.call(desc("tenant=t2", "user=u")), 0, codeOK, domain+".tenant.user", 2, hour, 1, false)
	// Limit overrides: the override's rule on the matched limit's window
	// when it has the limit's unit, else on its own, named for the limit.
	expect(t, "override", c.call(override(10, minute, desc("user=h"))), 0, codeOK, user+"/60", 10, minute, 9, false)
	expect(t, "override on a full window", c.call(override(10, hour, desc("user=a"))), 0, codeOK, user, 10, hour, 6, false)
	expect(t, "override on no limit", c.call(override(10, hour, desc("nobody=a"))), 0, codeOK, domain+"/3600", 10, hour, 9, false)
	// Quota descriptors.
	expect(t, "quota", c.call(desc("quota=q1")), 0, codeOK, domain+".quota", 1, hour, 0, false)
	if resp := c.call(desc("quota=q1"), desc("quota=q2")); resp.GetOverallCode() != codeOK || resp.GetStatuses()[0].GetCode() != codeOver {
		t.Fatalf("one quota over: %v", resp)
	}
	if resp := c.call(desc("quota=q1"), desc("quota=q2")); resp.GetOverallCode() != codeOver {
		t.Fatalf("every quota over: %v", resp)
	}
	// Another domain with the same key and value: a window of its own.
	expect(t, "another domain", newRLSCaller(t, app.GRPCAddr, other).call(desc("user=a")), 0, codeOK, other+".user", 1, hour, 0, false)

	// Statistics as envoyproxy/ratelimit keeps them: per value where
	// detailed_metric or value_to_metric ask, near the limit past 80 % of
	// it, over it under shadow_mode.
	for range 9 {
		c.call(desc("region=eu"))
	}
	for range 3 {
		c.call(desc("team=red", "member=m"))
	}
	m := metrics(t, app)
	for _, want := range []string{
		`ratescope_envoy_hits_total{key="` + domain + `.region_eu",stat="total_hits"} 9`,
		`ratescope_envoy_hits_total{key="` + domain + `.region_eu",stat="within_limit"} 9`,
		`ratescope_envoy_hits_total{key="` + domain + `.region_eu",stat="near_limit"} 1`,
		`ratescope_envoy_hits_total{key="` + domain + `.team_red.member",stat="over_limit"} 2`,
		`ratescope_envoy_hits_total{key="` + domain + `.team_red.member",stat="shadow_mode"} 2`,
		`ratescope_envoy_hits_total{key="` + user + `",stat="total_hits"} `,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %s:\n%s", want, grepLines(m, "envoy_hits"))
		}
	}

	// The windows are ratescope's own: on the API and the page under the
	// domain and entries as key, in the metrics under the limit's name.
	r := do(t, "GET", app.URL+"/api/v1/window?policy="+url.QueryEscape(user)+"&key="+url.QueryEscape(domain+":user=a"), "")
	if r.status != 200 || num(t, r, "count") != 4 || num(t, r, "limit") != 3 {
		t.Fatalf("window of user=a: %d %s", r.status, r.raw)
	}
	if !strings.Contains(m, `ratescope_decisions_total{outcome="allowed",policy="`+user+`"}`) {
		t.Fatalf("no decisions counted for %s:\n%s", user, grepLines(m, "decisions_total"))
	}
}

func headerMap(resp *rlsv3.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, v := range resp.GetResponseHeadersToAdd() {
		h[v.GetKey()] = v.GetValue()
	}
	return h
}
