package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/server"
)

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func do(t testing.TB, method, u, body string, header ...string) response {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := response{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out.body); err != nil {
			t.Fatalf("%s %s: body is not a JSON object: %q", method, u, b)
		}
	}
	return out
}

// doRaw is do for answers that are not JSON.
func doRaw(t testing.TB, method, u string, header ...string) (response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, raw: string(b)}, string(b)
}

func num(t testing.TB, r response, k string) int64 {
	t.Helper()
	v, ok := r.body[k].(float64)
	if !ok {
		t.Fatalf("%s = %#v, want a number in %s", k, r.body[k], r.raw)
	}
	return int64(v)
}

// startApp runs the server on env["REDIS_URL"], else on a Redis of the
// test's own (redistest.URL). Tests are about behaviour, not Redis latency,
// so the check timeout is generous unless a test sets one: the embedded Redis
// under the race detector on a loaded machine can take longer than the
// default 150 ms for a check.
func startApp(t testing.TB, env map[string]string, args ...string) *apptest.App {
	t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["REDIS_URL"]; !ok {
		env["REDIS_URL"] = redistest.URL(t)
	}
	if _, ok := env["RATESCOPE_CHECK_TIMEOUT"]; !ok {
		env["RATESCOPE_CHECK_TIMEOUT"] = "2s"
	}
	return apptest.Start(t, env, args...)
}

func newKey() string { return "k-" + uuid.NewString()[:12] }

func TestCheckAllowedThenDenied(t *testing.T) {
	app := startApp(t, nil)
	key := newKey()
	u := app.URL + "/api/v1/check?policy=demo&key=" + key
	for i := 1; i <= 5; i++ {
		r := do(t, "POST", u, "")
		if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("check %d: %d %s", i, r.status, r.raw)
		}
		if r.body["allowed"] != true || r.body["key"] != key || r.body["policy"] != "demo" ||
			num(t, r, "count") != int64(i) || num(t, r, "limit") != 5 || num(t, r, "remaining") != int64(5-i) ||
			num(t, r, "windowMs") != 10000 || num(t, r, "retryAfterMs") != 0 {
			t.Fatalf("check %d: %s", i, r.raw)
		}
		if _, err := uuid.Parse(r.body["id"].(string)); err != nil {
			t.Fatalf("id: %v", err)
		}
		if r.header.Get("Retry-After") != "" {
			t.Fatal("Retry-After on a 200")
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"demo";q=5;w=10` {
			t.Fatalf("RateLimit-Policy = %q", got)
		}
		wantRL := fmt.Sprintf(`"demo";r=%d;t=`, 5-i)
		if got := r.header.Get("RateLimit"); !strings.HasPrefix(got, wantRL) {
			t.Fatalf("RateLimit = %q, want %s…", got, wantRL)
		}
		rules := r.body["rules"].([]any)
		if len(rules) != 1 || rules[0].(map[string]any)["count"].(float64) != float64(i) {
			t.Fatalf("rules %v", rules)
		}
	}
	r := do(t, "POST", u, "")
	if r.status != 429 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("6th: %d %s", r.status, r.raw)
	}
	if r.body["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" ||
		r.body["allowed"] != false || num(t, r, "status") != 429 || r.body["id"] != nil ||
		num(t, r, "count") != 5 || num(t, r, "remaining") != 0 {
		t.Fatalf("429 body %s", r.raw)
	}
	if vp, _ := r.body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "demo" {
		t.Fatalf("violated-policies %v", r.body["violated-policies"])
	}
	retry := num(t, r, "retryAfterMs")
	oldest := num(t, r, "oldestMs")
	now := num(t, r, "nowMs")
	if retry != oldest+10000-now || retry <= 0 {
		t.Fatalf("retryAfterMs %d, want oldest+window-now = %d", retry, oldest+10000-now)
	}
	if got, want := r.header.Get("Retry-After"), strconv.FormatInt(int64(math.Ceil(float64(retry)/1000)), 10); got != want {
		t.Fatalf("Retry-After = %q, want %q (rounded up)", got, want)
	}
	if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"demo";r=0;t=%s`, r.header.Get("Retry-After")); got != want {
		t.Fatalf("RateLimit = %q, want %q", got, want)
	}
}

func TestCheckDefaultsAndBody(t *testing.T) {
	app := startApp(t, nil, "--policy", "bulk=10/1m")
	key := newKey()
	r := do(t, "POST", app.URL+"/api/v1/check", fmt.Sprintf(`{"key":%q,"policy":"bulk","cost":4,"extra":[1]}`, key))
	if r.status != 200 || num(t, r, "count") != 4 || num(t, r, "remaining") != 6 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	// Same value in query and body is fine; the default policy applies when none is named.
	r = do(t, "POST", app.URL+"/api/v1/check?key="+key, fmt.Sprintf(`{"key":%q}`, key))
	if r.status != 200 || r.body["policy"] != "default" || num(t, r, "limit") != 10 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	// A '+' sent as %2B is part of the key.
	r = do(t, "POST", app.URL+"/api/v1/check?policy=demo&key=a%2Bb", "")
	if r.status != 200 || r.body["key"] != "a+b" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}

func TestMultiRuleHeaders(t *testing.T) {
	app := startApp(t, nil, "--policy", "login=2/1s,5/1m")
	key := newKey()
	u := app.URL + "/api/v1/check?policy=login&key=" + key
	do(t, "POST", u, "")
	r := do(t, "POST", u, "")
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if got := r.header.Get("RateLimit-Policy"); got != `"login/1";q=2;w=1, "login/60";q=5;w=60` {
		t.Fatalf("RateLimit-Policy = %q", got)
	}
	if got := r.header.Get("RateLimit"); !regexp.MustCompile(`^"login/1";r=0;t=1, "login/60";r=3;t=60$`).MatchString(got) {
		t.Fatalf("RateLimit = %q", got)
	}
	// Binding rule when allowed: least remaining, the 1s rule.
	if num(t, r, "limit") != 2 || num(t, r, "windowMs") != 1000 || num(t, r, "remaining") != 0 {
		t.Fatalf("binding rule %s", r.raw)
	}
	r = do(t, "POST", u, "")
	if r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("%d %v %s", r.status, r.header, r.raw)
	}
	if vp := r.body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "login/1" {
		t.Fatalf("violated-policies %v", vp)
	}
}

func TestBadInput(t *testing.T) {
	app := startApp(t, nil, "--policy", "small=3/1m")
	long := strings.Repeat("k", 129)
	big := `{"key":"` + strings.Repeat("x", 70_000) + `"}`
	cases := []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"missing key", "POST", "/api/v1/check", "", 400, "key"},
		{"empty key", "POST", "/api/v1/check?key=", "", 400, "key"},
		{"space in key", "POST", "/api/v1/check?key=a+b", "", 400, "key"},
		{"brace in key", "POST", "/api/v1/check?key=%7Bx%7D", "", 400, "key"},
		{"key too long", "POST", "/api/v1/check?key=" + long, "", 400, "key"},
		{"non-ascii key", "POST", "/api/v1/check?key=%C3%A9", "", 400, "key"},
		{"unknown policy", "POST", "/api/v1/check?key=a&policy=nope", "", 400, "policy"},
		{"empty policy", "POST", "/api/v1/check?key=a&policy=", "", 400, "policy"},
		{"cost zero", "POST", "/api/v1/check?key=a&cost=0", "", 400, "cost"},
		{"cost negative", "POST", "/api/v1/check?key=a&cost=-1", "", 400, "cost"},
		{"cost above smallest limit", "POST", "/api/v1/check?key=a&policy=small&cost=4", "", 400, "cost"},
		{"cost fraction", "POST", "/api/v1/check?key=a&cost=1.5", "", 400, "cost"},
		{"cost word", "POST", "/api/v1/check?key=a&cost=one", "", 400, "cost"},
		{"cost huge", "POST", "/api/v1/check?key=a&cost=99999999999999999999999", "", 400, "cost"},
		{"repeated key", "POST", "/api/v1/check?key=a&key=b", "", 400, "key"},
		{"repeated policy", "POST", "/api/v1/check?key=a&policy=demo&policy=demo", "", 400, "policy"},
		{"body not JSON", "POST", "/api/v1/check", "key=a", 400, "body"},
		{"body an array", "POST", "/api/v1/check", `["a"]`, 400, "body"},
		{"body trailing data", "POST", "/api/v1/check", `{"key":"a"} {}`, 400, "body"},
		{"body key a number", "POST", "/api/v1/check", `{"key":5}`, 400, "key"},
		{"body cost a string", "POST", "/api/v1/check", `{"key":"a","cost":"1"}`, 400, "cost"},
		{"body cost a float", "POST", "/api/v1/check", `{"key":"a","cost":1.0}`, 400, "cost"},
		{"body cost exponent", "POST", "/api/v1/check", `{"key":"a","cost":1e0}`, 400, "cost"},
		{"query and body disagree", "POST", "/api/v1/check?key=a", `{"key":"b"}`, 400, "key"},
		{"malformed query", "POST", "/api/v1/check?key=%zz", "", 400, "query"},
		{"body too large", "POST", "/api/v1/check", big, 413, ""},
		{"wrong method on check", "GET", "/api/v1/check?key=a", "", 405, ""},
		{"wrong method on window", "PUT", "/api/v1/window?key=a", "", 405, ""},
		{"window without key", "GET", "/api/v1/window?policy=demo", "", 400, "key"},
		{"window unknown policy", "GET", "/api/v1/window?key=a&policy=zzz", "", 400, "policy"},
		{"reset bad key", "DELETE", "/api/v1/window?key=a%20b&policy=demo", "", 400, "key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, app.URL+tc.path, tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.raw)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q", ct)
			}
			if num(t, r, "status") != int64(tc.status) || r.body["title"] == "" || r.body["type"] == nil {
				t.Fatalf("not a problem document: %s", r.raw)
			}
			if tc.field == "" {
				return
			}
			errs, _ := r.body["errors"].([]any)
			for _, e := range errs {
				if e.(map[string]any)["field"] == tc.field && e.(map[string]any)["detail"] != "" {
					return
				}
			}
			t.Fatalf("errors %v name no %q", errs, tc.field)
		})
	}
	if strings.Contains(app.Logs(), "level=ERROR") {
		t.Fatalf("bad input logged errors:\n%s", app.Logs())
	}
}

func TestResetAuthorization(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "s3cret-admin"}, "--policy", "login=5/1m")
	key := newKey()
	check := func(policy string) {
		if r := do(t, "POST", app.URL+"/api/v1/check?key="+key+"&policy="+policy, ""); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	}
	window := func(policy string) int64 {
		return num(t, do(t, "GET", app.URL+"/api/v1/window?key="+key+"&policy="+policy, ""), "count")
	}
	check("login")
	check("demo")
	u := app.URL + "/api/v1/window?key=" + key + "&policy=login"
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "Basic s3cret-admin"}, {"Authorization", "Bearer "}} {
		r := do(t, "DELETE", u, "", h...)
		if r.status != 401 || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%v: %d %v %s", h, r.status, r.header, r.raw)
		}
	}
	if window("login") != 1 {
		t.Fatal("an unauthorized reset changed the window")
	}
	if r := do(t, "DELETE", u, "", "Authorization", "Bearer s3cret-admin"); r.status != 204 || r.raw != "" {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if window("login") != 0 {
		t.Fatal("reset did not empty the window")
	}
	// The sandbox needs no token.
	if r := do(t, "DELETE", app.URL+"/api/v1/window?key="+key+"&policy=demo", ""); r.status != 204 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if window("demo") != 0 {
		t.Fatal("demo reset did not empty the window")
	}

	noAdmin := startApp(t, nil, "--policy", "login=5/1m")
	if r := do(t, "DELETE", noAdmin.URL+"/api/v1/window?key=a&policy=login", "", "Authorization", "Bearer anything"); r.status != 403 {
		t.Fatalf("without an admin token configured: %d %s", r.status, r.raw)
	}
}

func TestAPIToken(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_API_TOKEN": "api-tok", "RATESCOPE_ADMIN_TOKEN": "adm-tok"}, "--policy", "login=5/1m")
	u := app.URL + "/api/v1/check?policy=login&key=" + newKey()
	for _, tc := range []struct {
		header []string
		status int
	}{
		{nil, 401},
		{[]string{"Authorization", "Bearer nope"}, 401},
		{[]string{"Authorization", "Bearer api-tok"}, 200},
		{[]string{"Authorization", "Bearer adm-tok"}, 200},
	} {
		if r := do(t, "POST", u, "", tc.header...); r.status != tc.status {
			t.Fatalf("%v: %d, want %d: %s", tc.header, r.status, tc.status, r.raw)
		}
	}
	if r := do(t, "GET", app.URL+"/api/v1/window?policy=login&key=a", ""); r.status != 401 {
		t.Fatalf("window without token: %d", r.status)
	}
	if r := do(t, "POST", app.URL+"/api/v1/check?policy=demo&key=a", ""); r.status != 200 {
		t.Fatalf("demo without token: %d", r.status)
	}
}

func TestPoliciesAndHealth(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_POLICIES": "login=5/1m,20/1h;api=100/1s;burst=10/1m@bucket+shadow"})
	r := do(t, "GET", app.URL+"/api/v1/policies", "")
	want := `{"policies":[{"name":"default","rules":[{"limit":10,"windowMs":60000}],"algorithm":"log","shadow":false},{"name":"demo","rules":[{"limit":5,"windowMs":10000}],"algorithm":"log","shadow":false},{"name":"login","rules":[{"limit":5,"windowMs":60000},{"limit":20,"windowMs":3600000}],"algorithm":"log","shadow":false},{"name":"api","rules":[{"limit":100,"windowMs":1000}],"algorithm":"log","shadow":false},{"name":"burst","rules":[{"limit":10,"windowMs":60000}],"algorithm":"bucket","shadow":true}]}`
	if r.status != 200 || !regexp.MustCompile(`^`+regexp.QuoteMeta(strings.TrimSuffix(want, "}"))+`,"version":"[0-9a-f]{12}","loadedAt":\d{13}}$`).MatchString(strings.TrimSpace(r.raw)) {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	if r := do(t, "GET", app.URL+"/healthz", ""); r.status != 200 {
		t.Fatalf("healthz %d", r.status)
	}
	if r := do(t, "GET", app.URL+"/readyz", ""); r.status != 200 || r.body["redis"] != "up" {
		t.Fatalf("readyz %d %s", r.status, r.raw)
	}
	if err := server.Run(context.Background(), []string{"ratescope", "healthcheck", "--addr", app.Addr}, func(string) string { return "" }, io.Discard); err != nil {
		t.Fatalf("healthcheck subcommand: %v", err)
	}
	m := do(t, "GET", app.URL+"/api/v1/check", "") // 405, counted nowhere
	_ = m
	resp, err := http.Get(app.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"ratescope_check_duration_seconds", "go_goroutines"} {
		if !strings.Contains(string(b), name) {
			t.Fatalf("/metrics lacks %s", name)
		}
	}
}

func TestMetricsCountDecisions(t *testing.T) {
	app := startApp(t, nil)
	key := newKey()
	for range 7 {
		do(t, "POST", app.URL+"/api/v1/check?policy=demo&key="+key, "")
	}
	resp, err := http.Get(app.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`ratescope_decisions_total{outcome="allowed",policy="demo"} 5`,
		`ratescope_decisions_total{outcome="denied",policy="demo"} 2`,
		`ratescope_check_duration_seconds_count 7`,
	} {
		if !strings.Contains(string(b), line) {
			t.Fatalf("/metrics lacks %q", line)
		}
	}
}

func TestConfigErrorsStopStartup(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--policy", "login=5"}, nil, `policy "login"`},
		{[]string{"--policy", "a=1/1s", "--policy", "a=2/2s"}, nil, `"a" is defined twice`},
		{[]string{"--policy", "a=1/1s,2/1s"}, nil, "appears twice"},
		{nil, map[string]string{"RATESCOPE_POLICIES": "x=0/1s"}, "limit"},
		{[]string{"--fail-mode", "maybe"}, nil, "--fail-mode"},
		{nil, map[string]string{"RATESCOPE_CHECK_TIMEOUT": "soon"}, "RATESCOPE_CHECK_TIMEOUT"},
		{[]string{"--log-format", "xml"}, nil, "--log-format"},
		{[]string{"--nope"}, nil, "nope"},
		{[]string{"--max-conns-per-client", "-1"}, nil, "--max-conns-per-client"},
		{nil, map[string]string{"RATESCOPE_MAX_VIEWERS": "many"}, "RATESCOPE_MAX_VIEWERS"},
		{[]string{"--max-viewers-per-client", "-5"}, nil, "--max-viewers-per-client"},
	} {
		args := append([]string{"ratescope"}, tc.args...)
		err := server.Run(context.Background(), args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want it to mention %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestFlagsWinOverEnv(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_POLICIES": "demo=2/10s"}, "--policy", "demo=3/10s")
	r := do(t, "GET", app.URL+"/api/v1/policies", "")
	if !strings.Contains(r.raw, `{"name":"demo","rules":[{"limit":3,"windowMs":10000}],"algorithm":"log","shadow":false}`) {
		t.Fatalf("%s", r.raw)
	}
}

// TestFailModes stops and pauses a real Redis under a running server: every
// check is answered within the check timeout (plus slack for a loaded
// machine), as the fail mode says, and checks work again once Redis is back.
// It kills and restarts a real redis-server (skipped without one).
func TestFailModes(t *testing.T) {
	redistest.Need(t, "redis-server")
	const timeout = 200 * time.Millisecond
	const slack = 800 * time.Millisecond // a bound that proves no hang, not a benchmark
	for _, mode := range []string{"closed", "open"} {
		t.Run(mode, func(t *testing.T) {
			rs := redistest.Start(t)
			app := startApp(t, map[string]string{"REDIS_URL": rs.URL},
				"--fail-mode", mode, "--check-timeout", timeout.String())
			u := app.URL + "/api/v1/check?policy=demo&key=" + newKey()
			if r := do(t, "POST", u, ""); r.status != 200 {
				t.Fatalf("before the fault: %d", r.status)
			}
			expect := func(phase string) {
				t.Helper()
				for range 3 {
					start := time.Now()
					r := do(t, "POST", u, "")
					took := time.Since(start)
					if took > timeout+slack {
						t.Fatalf("%s: answered in %v", phase, took)
					}
					switch mode {
					case "closed":
						if r.status != 503 || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/problem+json" {
							t.Fatalf("%s: %d %v %s", phase, r.status, r.header, r.raw)
						}
					case "open":
						if r.status != 200 || r.body["allowed"] != true || r.body["failOpen"] != true || r.header.Get("RateLimit") != "" {
							t.Fatalf("%s: %d %v %s", phase, r.status, r.header, r.raw)
						}
					}
				}
				// Readiness follows within a probe or two.
				waitFor(t, readyOffWithin, phase+": readyz", func() bool {
					ready := do(t, "GET", app.URL+"/readyz", "")
					want := map[string]int{"closed": 503, "open": 200}[mode]
					return ready.status == want && ready.body["redis"] == "down"
				})
			}
			rs.Pause()
			expect("paused")
			rs.Resume()
			rs.Stop()
			expect("stopped")
			rs.Restart()
			deadline := time.Now().Add(5 * time.Second)
			for {
				r := do(t, "POST", u, "")
				if r.status == 200 && r.body["failOpen"] == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("checks did not recover within 5s of Redis returning: %d %s", r.status, r.raw)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if strings.Contains(app.Logs(), "panic") {
				t.Fatalf("panic in logs:\n%s", app.Logs())
			}
		})
	}
}

func TestWindowEndpoint(t *testing.T) {
	app := startApp(t, nil)
	key := newKey()
	var ids []string
	for range 3 {
		r := do(t, "POST", app.URL+"/api/v1/check", `{"key":"`+key+`","policy":"demo"}`)
		ids = append(ids, r.body["id"].(string))
	}
	r := do(t, "GET", app.URL+"/api/v1/window?"+url.Values{"key": {key}, "policy": {"demo"}}.Encode(), "")
	if r.status != 200 || num(t, r, "count") != 3 || num(t, r, "limit") != 5 || r.body["truncated"] != false || r.body["type"] != nil {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	entries := r.body["entries"].([]any)
	got := map[string]bool{}
	for _, e := range entries {
		got[e.(map[string]any)["id"].(string)] = true
	}
	for _, id := range ids {
		if !got[id] {
			t.Fatalf("entries %v lack %s", entries, id)
		}
	}
	// Reading consumed nothing.
	if r2 := do(t, "GET", app.URL+"/api/v1/window?key="+key+"&policy=demo", ""); num(t, r2, "count") != 3 {
		t.Fatalf("%s", r2.raw)
	}
}

// TestAccessLogStatus: the access log records the status the client received
// — a problem document's 400, a 404 — not the 200 the response held before
// the handler failed, and checks are logged only at debug level.
func TestAccessLogStatus(t *testing.T) {
	line := func(logs, path, status string) bool {
		re := regexp.MustCompile(`msg=request method=\w+ path=` + regexp.QuoteMeta(path) + ` status=` + status + `\b`)
		return re.MatchString(logs)
	}
	debug := startApp(t, nil, "--log-level", "debug")
	if r := do(t, "POST", debug.URL+"/api/v1/check?policy=demo&key="+newKey()+"&cost=0", ""); r.status != 400 {
		t.Fatalf("cost=0: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", debug.URL+"/api/v1/check?policy=demo&key="+newKey(), ""); r.status != 200 {
		t.Fatalf("check: %d %s", r.status, r.raw)
	}
	if r := do(t, "GET", debug.URL+"/no-such-page", ""); r.status != 404 {
		t.Fatalf("unknown path: %d", r.status)
	}
	waitFor(t, 5*time.Second, "access lines with the statuses sent", func() bool {
		logs := debug.Logs()
		return line(logs, "/api/v1/check", "400") && line(logs, "/api/v1/check", "200") && line(logs, "/no-such-page", "404")
	})

	info := startApp(t, nil)
	if r := do(t, "POST", info.URL+"/api/v1/check?policy=demo&key="+newKey()+"&cost=0", ""); r.status != 400 {
		t.Fatalf("cost=0: %d %s", r.status, r.raw)
	}
	if r := do(t, "GET", info.URL+"/no-such-page", ""); r.status != 404 {
		t.Fatalf("unknown path: %d", r.status)
	}
	waitFor(t, 5*time.Second, "an access line for the 404", func() bool { return line(info.Logs(), "/no-such-page", "404") })
	if strings.Contains(info.Logs(), "path=/api/v1/check") {
		t.Fatalf("a check was logged at info level:\n%s", info.Logs())
	}
}
