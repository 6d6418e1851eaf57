package server_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

const overridesEntryConfig = `
policies:
  - name: fa
    rules: ["2/1m"]
  - name: login
    rules: ["2/1m"]
routes:
  - match: {pathPrefix: /ov/}
    policy: fa
    key: header:X-User
envoy:
  - domain: edge
    descriptors:
      - keys: [remote_address]
        policy: login
`

// TestOverrideForwardAuth: forward auth decides with the override of the
// route's key — allowed answers carry its RateLimit-Policy, the denial its
// name — and other keys with the policy.
func TestOverrideForwardAuth(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--config", writeConfig(t, overridesEntryConfig))
	user := "u" + newKey()
	putOverride(t, app, "fa", "key", user, `{"rules":["3/1m"],"note":"partner"}`)
	for i := range 3 {
		r := fa(t, app, "/forward-auth/ov/x", "X-User", user)
		if r.status != 200 || r.header.Get("RateLimit-Policy") != `"fa";q=3;w=60` {
			t.Fatalf("request %d: %d %v", i+1, r.status, r.header)
		}
	}
	r := fa(t, app, "/forward-auth/ov/x", "X-User", user)
	if r.status != 429 || r.body["override"] != "key" || r.body["key"] != user || num(t, r, "limit") != 3 {
		t.Fatalf("the fourth: %d %s", r.status, r.raw)
	}
	if r := fa(t, app, "/forward-auth/ov/x", "X-User", "other"+user); r.header.Get("RateLimit-Policy") != `"fa";q=2;w=60` {
		t.Fatalf("another user: %d %v", r.status, r.header)
	}
}

// TestOverrideEnvoy: the Envoy rate limit service decides a descriptor's
// client with its override — current_limit and the RateLimit-Policy header
// show it, the viewers' decision messages carry it — and an operator's
// override wins over the limit a descriptor carries, which still applies to
// clients without one.
func TestOverrideEnvoy(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"},
		"--config", writeConfig(t, overridesEntryConfig), "--grpc-addr", "127.0.0.1:0")
	c := rlsv3.NewRateLimitServiceClient(grpcConn(t, app))
	key := newKey()
	putOverride(t, app, "login", "key", key, `{"rules":["3/1m"]}`)
	v := watch(t, app, "policy=login&key="+key, nil)
	v.next("snapshot", nil)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp := shouldRateLimit(t, c, "remote_address", key)
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != want || st.GetCurrentLimit().GetRequestsPerUnit() != 3 || !hasHeader(resp, "RateLimit-Policy", `"login";q=3;w=60`) {
			t.Fatalf("call %d: %v", i+1, resp)
		}
		if m := v.next("decision", nil); m["override"] != "key" || m["limit"] != float64(3) {
			t.Fatalf("call %d reached the viewer as %v", i+1, m)
		}
	}

	// A descriptor's own limit of 1 an hour: the operator's override of
	// this client wins; a client without one gets Envoy's.
	withLimit := func(value string) *rlsv3.RateLimitResponse {
		t.Helper()
		req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: value}},
			Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 3}, // HOUR
		}}}
		resp, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	vip, plain := newKey(), newKey()
	putOverride(t, app, "login", "key", vip, `{"rules":["2/1m"]}`)
	for i := range 2 {
		if resp := withLimit(vip); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 2 {
			t.Fatalf("call %d with Envoy's limit, under the override: %v", i+1, resp)
		}
	}
	if resp := withLimit(plain); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first call of a client without an override: %v", resp)
	}
	if resp := withLimit(plain); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second call under Envoy's 1 an hour: %v", resp)
	}
}

func hasHeader(resp *rlsv3.RateLimitResponse, name, value string) bool {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == name && h.GetValue() == value {
			return true
		}
	}
	return false
}

// TestOverridesFull: a policy holds at most 100,000 overrides; the
// 100,001st PUT gets 409 and one already there may still change. The hash is
// filled directly, in one pipeline, so the test takes a moment.
func TestOverridesFull(t *testing.T) {
	u := redistest.RealURL(t)
	app := startApp(t, map[string]string{"REDIS_URL": u, "RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "fl=5/1m")
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range 100_000 {
		pipe.HSet(ctx, "ratescope:overrides:fl", fmt.Sprintf("key:k%d", i), `{"rules":["1/1s"],"note":"","updatedMs":1}`)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	_, router := apiDoc(t, app)
	x := call(t, "PUT", overrideURL(app, "fl", "prefix", "new:"), `{"rules":["1/1s"]}`, admin...)
	must(t, router, 409, x)
	if !strings.Contains(string(x.respBody), "100000") {
		t.Errorf("the 100,001st: %s", x.respBody)
	}
	putOverride(t, app, "fl", "key", "k5", `{"rules":["2/1s"]}`)
}

// TestOverridesBadInput: every mistake gets a 4xx naming what is wrong; a
// caller without the admin token gets 401 (403 where none is configured),
// whatever the policy.
func TestOverridesBadInput(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "bi=5/1m", "--policy", "bg=5/1m@gcra")
	long := strings.Repeat("a", 129)
	for _, c := range []struct {
		method, query, body, field, says string
	}{
		{"PUT", "policy=bi&key=k1", `{"rules":["abc"]}`, "rules[0]", "LIMIT/WINDOW"},
		{"PUT", "policy=bi&key=k1", `{"rules":["5/1m","1000000/1h"]}`, "rules[1]", "100000"},
		{"PUT", "policy=bi&key=k1", `{"rules":["5/1m","6/60s"]}`, "rules", "twice"},
		{"PUT", "policy=bi&key=k1", `{"rules":["5/1m+shadow"]}`, "rules[0]", "options stay"},
		{"PUT", "policy=bi&key=k1", `{"rules":[]}`, "rules", "at least one"},
		{"PUT", "policy=bi&key=k1", `{"rules":"5/1m"}`, "rules", "list of strings"},
		{"PUT", "policy=bi&key=k1", `{"note":"x"}`, "rules", "required"},
		{"PUT", "policy=bi&key=k1", `{"rules":["5/1m"],"note":"` + strings.Repeat("n", 1025) + `"}`, "note", "1024"},
		{"PUT", "policy=bi&key=k1", `{"rules":["5/1m"],"note":7}`, "note", "string"},
		{"PUT", "policy=bi&key=k1", `rules`, "body", "JSON object"},
		{"PUT", "policy=bi&key=k1", ``, "body", "JSON object"},
		{"PUT", "policy=bi&prefix=bad%20prefix", `{"rules":["5/1m"]}`, "prefix", "1-128 bytes"},
		{"PUT", "policy=bi&prefix=" + long, `{"rules":["5/1m"]}`, "prefix", "1-128 bytes"},
		{"PUT", "policy=bi&prefix=", `{"rules":["5/1m"]}`, "prefix", "1-128 bytes"},
		{"PUT", "policy=bi&key=k1&prefix=k", `{"rules":["5/1m"]}`, "prefix", "not both"},
		{"PUT", "policy=bi", `{"rules":["5/1m"]}`, "key", "key (one client) or prefix"},
		{"PUT", "policy=bi&key=bad%20key", `{"rules":["5/1m"]}`, "key", "not a valid key"},
		{"PUT", "policy=nope&key=k1", `{"rules":["5/1m"]}`, "policy", "unknown policy"},
		{"PUT", "key=k1", `{"rules":["5/1m"]}`, "policy", "required"},
		{"PUT", "policy=bi&policy=bg&key=k1", `{"rules":["5/1m"]}`, "policy", "2 times"},
		{"DELETE", "policy=bi", ``, "key", "key (one client) or prefix"},
		{"DELETE", "policy=bi&key=a&prefix=b", ``, "prefix", "not both"},
		{"GET", "policy=bi&limit=0", ``, "limit", "from 1 to 1000"},
		{"GET", "policy=bi&limit=1001", ``, "limit", "from 1 to 1000"},
		{"GET", "policy=bi&cursor=%25%25", ``, "cursor", "nextCursor"},
		{"GET", "policy=bi&key=a&prefix=b", ``, "prefix", "not both"},
		{"GET", "", ``, "policy", "required"},
	} {
		r := do(t, c.method, app.URL+"/api/v1/overrides?"+c.query, c.body, admin...)
		if r.status != 400 || !namesFieldSaying(r, c.field, c.says) {
			t.Errorf("%s ?%s %s: %d %s; want 400 naming %s (%q)", c.method, c.query, truncated(c.body), r.status, r.raw, c.field, c.says)
		}
	}
	// A million a minute is within gcra's bounds.
	putOverride(t, app, "bg", "key", "k1", `{"rules":["1000000/1m"]}`)

	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}} {
		for _, m := range []string{"PUT", "GET", "DELETE"} {
			r := do(t, m, overrideURL(app, "demo", "key", "k1"), `{"rules":["5/1m"]}`, hdr...)
			if r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s on demo with %v: %d %v", m, hdr, r.status, r.header)
			}
		}
	}
	open := startApp(t, nil, "--policy", "bi=5/1m")
	if r := do(t, "PUT", overrideURL(open, "bi", "key", "k1"), `{"rules":["5/1m"]}`, admin...); r.status != 403 {
		t.Errorf("with no admin token configured: %d %s", r.status, r.raw)
	}
}

// namesFieldSaying reports whether a problem's errors name field with a
// detail that says says.
func namesFieldSaying(r response, field, says string) bool {
	errs, _ := r.body["errors"].([]any)
	for _, e := range errs {
		m, _ := e.(map[string]any)
		if m["field"] == field && strings.Contains(fmt.Sprint(m["detail"]), says) {
			return true
		}
	}
	return false
}

// TestOverridesListPages: GET pages through a policy's overrides, keys
// first then prefixes, each sorted, limit at a time, following nextCursor
// to the end; a prefix's own is found by prefix=, and ratescope_overrides
// counts them.
func TestOverridesListPages(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "lp=5/1m")
	for _, k := range []string{"c+3", "a:1", "b/2"} {
		putOverride(t, app, "lp", "key", k, `{"rules":["7/1m"]}`)
	}
	for _, p := range []string{"z:", "m:"} {
		putOverride(t, app, "lp", "prefix", p, `{"rules":["8/1m"],"note":"tier"}`)
	}
	var got []string
	cursor := ""
	for page := 0; ; page++ {
		q := []string{"limit", "2"}
		if cursor != "" {
			q = append(q, "cursor", cursor)
		}
		r := do(t, "GET", overrideURL(app, "lp", q...), "", admin...)
		list, _ := r.body["overrides"].([]any)
		if r.status != 200 || len(list) == 0 || len(list) > 2 {
			t.Fatalf("page %d: %d %s", page, r.status, r.raw)
		}
		for _, o := range list {
			m := o.(map[string]any)
			got = append(got, fmt.Sprint(m["key"], m["prefix"]))
		}
		next, _ := r.body["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if want := "a:1<nil> b/2<nil> c+3<nil> <nil>m: <nil>z:"; strings.Join(got, " ") != want {
		t.Fatalf("listed %q, want %q", strings.Join(got, " "), want)
	}
	if r := do(t, "GET", overrideURL(app, "lp", "prefix", "m:"), "", admin...); r.status != 200 || r.body["note"] != "tier" {
		t.Fatalf("GET prefix=m: %d %s", r.status, r.raw)
	}
	if r := do(t, "GET", overrideURL(app, "lp", "prefix", "q:"), "", admin...); r.status != 404 {
		t.Fatalf("GET prefix=q: %d %s", r.status, r.raw)
	}
	if r := do(t, "GET", app.URL+"/api/v1/overrides?"+url.Values{"policy": {"lp"}, "key": {"c+3"}}.Encode(), "", admin...); r.body["match"] != "key" {
		t.Fatalf("GET key=c+3: %s", r.raw)
	}
	if m := metrics(t, app); !strings.Contains(m, `ratescope_overrides{policy="lp"} 5`) || !strings.Contains(m, `ratescope_overrides{policy="demo"} 0`) {
		t.Errorf("/metrics: %s", grepLines(m, "ratescope_overrides"))
	}
}

// describeOverrides sends the override routes the answers they can give,
// and checks answers decided under an override, against the document
// (TestOpenAPIDescribesEveryAnswer's server: admin token adm, API token api).
func describeOverrides(t *testing.T, router routers.Router, app *apptest.App, api []string) {
	t.Helper()
	put := func(who, value, body string) exchange {
		return call(t, "PUT", overrideURL(app, "login", who, value), body, admin...)
	}
	must(t, router, 200, put("key", "oa-ov", `{"rules":["2/1m","5/1h"],"note":"gold"}`))
	must(t, router, 200, put("prefix", "oa-", `{"rules":["3/1m"],"note":null}`))
	must(t, router, 400, put("prefix", "oa-", `{"rules":["3/1m+shadow"]}`))
	must(t, router, 401, call(t, "PUT", overrideURL(app, "login", "key", "oa-ov"), `{"rules":["3/1m"]}`, api...))
	must(t, router, 413, put("key", "oa-ov", `{"rules":["`+strings.Repeat("1", 70<<10)+`"]}`))
	must(t, router, 200, call(t, "GET", overrideURL(app, "login", "limit", "1"), "", admin...))
	must(t, router, 200, call(t, "GET", overrideURL(app, "login", "key", "oa-ov"), "", admin...))
	must(t, router, 200, call(t, "GET", overrideURL(app, "login", "key", "oa-other"), "", admin...))
	must(t, router, 200, call(t, "GET", overrideURL(app, "login", "key", "else"), "", admin...))
	must(t, router, 200, call(t, "GET", overrideURL(app, "login", "prefix", "oa-"), "", admin...))
	must(t, router, 404, call(t, "GET", overrideURL(app, "login", "prefix", "zz"), "", admin...))
	must(t, router, 400, call(t, "GET", overrideURL(app, "nope"), "", admin...))
	must(t, router, 401, call(t, "GET", overrideURL(app, "login"), ""))
	for i := range 3 {
		x := call(t, "POST", app.URL+"/api/v1/check?key=oa-ov&policy=login", "", api...)
		if i < 2 {
			must(t, router, 200, x)
		} else {
			must(t, router, 429, x)
		}
		if !strings.Contains(string(x.respBody), `"override":"key"`) {
			t.Errorf("check %d under the override: %s", i+1, x.respBody)
		}
	}
	// The window and the overview name the override in force.
	for _, x := range []exchange{
		call(t, "GET", app.URL+"/api/v1/window?key=oa-ov&policy=login", "", api...),
		call(t, "GET", app.URL+"/api/v1/overview?policy=login", "", admin...),
	} {
		must(t, router, 200, x)
		if !strings.Contains(string(x.respBody), `"override":"key"`) {
			t.Errorf("%s under the override: %s", x.req.URL.Path, x.respBody)
		}
	}
	must(t, router, 204, call(t, "DELETE", overrideURL(app, "login", "key", "oa-ov"), "", admin...))
	must(t, router, 404, call(t, "DELETE", overrideURL(app, "login", "key", "oa-ov"), "", admin...))
	must(t, router, 400, call(t, "DELETE", overrideURL(app, "login"), "", admin...))
	must(t, router, 204, call(t, "DELETE", overrideURL(app, "login", "prefix", "oa-"), "", admin...))
}
