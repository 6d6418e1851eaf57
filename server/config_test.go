package server_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/server"
)

// replaceFile writes content the way editors save: into a temporary file
// beside it, then renamed over it.
func replaceFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".ratescope.yaml.swp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func version(t testing.TB, app *apptest.App) string {
	t.Helper()
	r := do(t, "GET", app.URL+"/api/v1/policies", "")
	v, _ := r.body["version"].(string)
	if len(v) != 12 || num(t, r, "loadedAt") < time.Now().Add(-time.Hour).UnixMilli() {
		t.Fatalf("policies: %s", r.raw)
	}
	return v
}

// waitFor polls cond until it holds or within has passed.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const reloadV1 = `
policies:
  - name: login
    rules: ["3/1m"]
routes:
  - match: {pathPrefix: /a}
    policy: login
`

// TestConfigReload edits a running server's config file: a new limit and a
// new route apply within 2 s with no restart and no window entry lost; an
// invalid edit is refused and logged, and checks go on under the old config;
// SIGHUP reloads too.
func TestConfigReload(t *testing.T) {
	path := writeConfig(t, reloadV1)
	app := startApp(t, nil, "--config", path)
	key := newKey()
	check := func() response { return do(t, "POST", app.URL+"/api/v1/check?policy=login&key="+key, "") }
	for i := 1; i <= 3; i++ {
		if r := check(); r.status != 200 {
			t.Fatalf("check %d: %d %s", i, r.status, r.raw)
		}
	}
	if r := check(); r.status != 429 {
		t.Fatalf("check 4 under 3/1m: %d", r.status)
	}
	if r := fa(t, app, "/forward-auth/b", "X-User", "u1"); r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Fatalf("/b before it is a route: %d %v", r.status, r.header)
	}
	v1 := version(t, app)

	// A new limit and a new route, saved the way editors do.
	replaceFile(t, path, `
policies:
  - name: login
    rules: ["5/1m"]
routes:
  - match: {pathPrefix: /a}
    policy: login
  - match: {pathPrefix: /b}
    policy: login
    key: header:X-User
`)
	start := time.Now()
	waitFor(t, 2*time.Second, "the edited config applied", func() bool { return version(t, app) != v1 })
	t.Logf("applied after %v", time.Since(start))
	// The window kept its three entries: two more fit under 5/1m, then no more.
	for i := 4; i <= 5; i++ {
		r := check()
		if r.status != 200 || num(t, r, "count") != int64(i) || num(t, r, "limit") != 5 || r.header.Get("RateLimit-Policy") != `"login";q=5;w=60` {
			t.Fatalf("check %d under 5/1m: %d %v %s", i, r.status, r.header, r.raw)
		}
	}
	if r := check(); r.status != 429 || num(t, r, "count") != 5 {
		t.Fatalf("check 6 under 5/1m: %d %s", r.status, r.raw)
	}
	if r := fa(t, app, "/forward-auth/b", "X-User", "u1"); r.status != 200 || r.header.Get("RateLimit") != `"login";r=4;t=60` {
		t.Fatalf("/b as a new route: %d %v", r.status, r.header)
	}
	if m := metrics(t, app); !strings.Contains(m, `ratescope_config_reloads_total{result="ok"} 1`) {
		t.Fatalf("reloads: %s", grepLines(m, "config_reloads"))
	}
	v2 := version(t, app)

	// An invalid edit (a misspelt field) is refused; the running config stays.
	if err := os.WriteFile(path, []byte(strings.Replace(reloadV1, "policies:", "polices:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the invalid edit refused", func() bool {
		return regexp.MustCompile(`ratescope_config_reloads_total\{result="error"\} [1-9]`).MatchString(metrics(t, app))
	})
	if logs := app.Logs(); !regexp.MustCompile(`config reload refused.*line 2: field polices not found`).MatchString(logs) {
		t.Fatalf("no log line names the field:\n%s", grepLines(logs, "config"))
	}
	// Refused once, not at every event in the folder (a log file written
	// beside it, say).
	refusals := func() string {
		return regexp.MustCompile(`ratescope_config_reloads_total\{result="error"\} (\d+)`).FindStringSubmatch(metrics(t, app))[1]
	}
	time.Sleep(3 * 150 * time.Millisecond) // the edit's own burst of events settles
	before := refusals()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(filepath.Dir(path), "server.log"), []byte(strings.Repeat("x", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if after := refusals(); after != before {
		t.Fatalf("the refused file was re-read and refused again: %s refusals, then %s", before, after)
	}
	if v := version(t, app); v != v2 {
		t.Fatalf("version %s after a refused edit, want %s", v, v2)
	}
	other := newKey()
	r := do(t, "POST", app.URL+"/api/v1/check?policy=login&key="+other, "")
	if r.status != 200 || num(t, r, "limit") != 5 {
		t.Fatalf("a check after the refused edit: %d %s", r.status, r.raw)
	}

	// SIGHUP re-reads the file: fixed now, it applies.
	if err := os.WriteFile(path, []byte(reloadV1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "SIGHUP reloaded", func() bool { return strings.Contains(app.Logs(), "reason=SIGHUP") })
	waitFor(t, 2*time.Second, "the fixed config applied", func() bool { return version(t, app) == v1 })
	if r := do(t, "POST", app.URL+"/api/v1/check?policy=login&key="+other, ""); r.status != 200 || num(t, r, "limit") != 3 {
		t.Fatalf("a check under the fixed config: %d %s", r.status, r.raw)
	}
}

// TestConfigFileErrors: a bad file stops start-up with a message naming the
// field (and its line).
func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		args       []string
		want       string
	}{
		{"unknown field", "policies: []\ntrustedProxy: [1.2.3.4]\n", nil, "line 2: field trustedProxy not found"},
		{"unknown nested field", "routes:\n  - match: {path: /x}\n    policy: demo\n", nil, "line 2: field path not found"},
		{"not YAML", "policies: [\n", nil, "failed to read the YAML"},
		{"no bytes at all", "", nil, "the file is empty"},
		{"two documents", "unmatched: allow\n---\nunmatched: deny\n", nil, "more than one document"},
		{"name in both", "policies:\n  - {name: login, rules: [5/1m]}\n", []string{"--policy", "login=5/1m"}, `policies[0].name (line 2): policy "login" is also defined by --policy`},
		{"name twice in the file", "policies:\n  - {name: a, rules: [5/1m]}\n  - {name: a, rules: [6/1m]}\n", nil, `policies[1].name (line 3): policy "a" is defined twice`},
		{"no rules", "policies:\n  - name: a\n", nil, "policies[0].rules"},
		{"bad rule", "policies:\n  - name: a\n    rules: [5/1m, 5]\n", nil, `policy "a"`},
		{"smuggled syntax", "policies:\n  - name: a\n    rules: [\"5/1m,6/1h\"]\n", nil, "policies[0].rules[0] (line 3)"},
		{"duplicate window", "policies:\n  - name: a\n    rules: [5/1m, 6/60s]\n", nil, "appears twice"},
		{"bad timezone", "policies:\n  - name: a\n    rules: [5/day]\n    timezone: Mars/Olympus\n", nil, `policies[0].timezone (line 4): "Mars/Olympus": want an IANA time zone`},
		{"smuggled timezone", "policies:\n  - name: a\n    rules: [5/day]\n    timezone: \"UTC+shadow\"\n", nil, "policies[0].timezone (line 4)"},
		{"duplicate period", "policies:\n  - name: a\n    rules: [5/day, 6/day]\n", nil, "period day appears twice"},
		{"bad trusted proxy", "trustedProxies: [10.0.0.0/8, nope]\n", nil, "trustedProxies[1] (line 1)"},
		{"bad unmatched", "unmatched: maybe\n", nil, "unmatched (line 1)"},
		{"route without policy", "routes:\n  - match: {pathPrefix: /}\n", nil, "routes[0].policy"},
		{"route with unknown policy", "routes:\n  - policy: nope\n", nil, `routes[0].policy (line 2): unknown policy "nope"`},
		{"bad key source", "routes:\n  - policy: demo\n    key: ip+cookie:x\n", nil, "routes[0].key (line 3)"},
		{"bad header name", "routes:\n  - policy: demo\n    key: \"header:X Y\"\n", nil, "routes[0].key"},
		{"cost above the limit", "routes:\n  - policy: demo\n    cost: 6\n", nil, "routes[0].cost (line 3)"},
		{"log cost above 1000", "policies:\n  - {name: big, rules: [100000/10s]}\nroutes:\n  - policy: big\n    cost: 1001\n", nil, "routes[0].cost (line 5): 1001: must be from 1 to 1000"},
		{"bad path prefix escape", "routes:\n  - policy: demo\n    match: {pathPrefix: /a%zz}\n", nil, "routes[0].match.pathPrefix"},
		{"bad deny status", "routes:\n  - policy: demo\n  - policy: demo\n    denyStatus: 200\n", nil, "routes[1].denyStatus (line 4)"},
		{"bad missingKey", "routes:\n  - policy: demo\n    missingKey: sometimes\n", nil, "routes[0].missingKey"},
		{"bad path prefix", "routes:\n  - policy: demo\n    match: {pathPrefix: login}\n", nil, "routes[0].match.pathPrefix"},
		{"bad method", "routes:\n  - policy: demo\n    match: {methods: [\"GE T\"]}\n", nil, "routes[0].match.methods[0]"},
		{"envoy without domain", "envoy:\n  - descriptors: [{keys: [remote_address], policy: demo}]\n", nil, "envoy[0].domain"},
		{"envoy unknown policy", "envoy:\n  - domain: edge\n    descriptors:\n      - keys: [remote_address]\n        policy: nope\n", nil, "envoy[0].descriptors[0].policy (line 5)"},
		{"envoy keys beyond a call's", "envoy:\n  - domain: edge\n    descriptors:\n      - {keys: [" + strings.Repeat("k,", 32) + "k], policy: demo}\n", nil, "envoy[0].descriptors[0].keys (line 4): 33 keys: at most 32"},
		{"envoy key beyond a call's", "envoy:\n  - domain: edge\n    descriptors:\n      - {keys: [" + strings.Repeat("k", 257) + "], policy: demo}\n", nil, "envoy[0].descriptors[0].keys (line 4): a key of more than 256 bytes"},
		{"envoy domain beyond a call's", "envoy:\n  - domain: " + strings.Repeat("d", 257) + "\n    descriptors: [{keys: [a], policy: demo}]\n", nil, "envoy[0].domain (line 2): 257 bytes: at most 256"},
		{"envoy keys twice", "envoy:\n  - domain: edge\n    descriptors:\n      - {keys: [a], policy: demo}\n      - {keys: [a], policy: demo}\n", nil, "envoy[0].descriptors[1].keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"ratescope", "--addr", "127.0.0.1:0", "--redis-url", "redis://127.0.0.1:1/0", "--config", writeConfig(t, tc.file)}, tc.args...)
			// Accepted by mistake, the server would run until the deadline.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := server.Run(ctx, args, func(string) string { return "" }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := server.Run(ctx, []string{"ratescope", "--addr", "127.0.0.1:0", "--config", filepath.Join(t.TempDir(), "missing.yaml")}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "failed to read the config file") {
		t.Fatalf("missing file: %v", err)
	}
	for _, args := range [][]string{{"--trusted-proxies", "10.0.0.0/8,bogus"}, {"--grpc-addr", "nowhere"}} {
		err := server.Run(ctx, append([]string{"ratescope", "--addr", "127.0.0.1:0"}, args...), func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: err = %v", args, err)
		}
	}
}

// TestConfigFileWithEnv: the file is named by RATESCOPE_CONFIG, its policies
// sit beside the environment's, and a full file (the README's) is accepted.
func TestConfigFileWithEnv(t *testing.T) {
	path := writeConfig(t, `
policies:
  - name: login
    rules: ["5/1m", "20/1h"]
    shadow: false
trustedProxies: ["10.0.0.0/8", "127.0.0.1/32"]
unmatched: allow
routes:
  - match: {host: api.example.com, methods: [POST], pathPrefix: /login}
    policy: login
    key: ip
    cost: 1
    denyStatus: 429
    missingKey: reject
envoy:
  - domain: edge
    descriptors:
      - keys: [remote_address]
        policy: login
`)
	app := startApp(t, map[string]string{"RATESCOPE_CONFIG": path, "RATESCOPE_POLICIES": "api=100/1s", "RATESCOPE_GRPC_ADDR": "127.0.0.1:0"})
	r := do(t, "GET", app.URL+"/api/v1/policies", "")
	for _, want := range []string{`{"name":"api"`, `{"name":"login","rules":[{"limit":5,"windowMs":60000},{"limit":20,"windowMs":3600000}],"algorithm":"log","shadow":false}`} {
		if !strings.Contains(r.raw, want) {
			t.Fatalf("policies %s lack %s", r.raw, want)
		}
	}
}
