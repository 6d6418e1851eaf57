package server_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/internal/apptest"
)

// writeConfig writes a config file into a folder of the test's own and
// returns its path.
func writeConfig(t testing.TB, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ratescope.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const forwardAuthConfig = `
policies:
  - name: login
    rules: ["2/1m"]
  - name: api
    rules: ["1/1s", "3/1m"]
routes:
  - match: {host: api.example.com, methods: [POST], pathPrefix: /login}
    policy: login
    key: ip
  - match: {host: api.example.com, pathPrefix: /v1/}
    policy: api
    key: header:X-Api-Key
    denyStatus: 403
  - match: {pathPrefix: /open/}
    policy: api
    key: header:X-Api-Key+host
    missingKey: allow
  - match: {pathPrefix: /costly}
    policy: login
    key: path
    cost: 2
`

// fa asks forward auth about an original request described by headers.
func fa(t testing.TB, app *apptest.App, path string, header ...string) response {
	t.Helper()
	return ask(t, "GET", app.URL+path, "", header...)
}

// ask is do with a Host of the test's choosing; header pairs are added in
// order, as repeated lines when a name repeats (as a chain of proxies sends
// them).
func ask(t testing.TB, method, url, host string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
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
			t.Fatalf("%s %s: body is not a JSON object: %q", method, url, b)
		}
	}
	return out
}

func TestForwardAuthRoutes(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, forwardAuthConfig))
	login := []string{"X-Forwarded-Method", "POST", "X-Forwarded-Host", "api.example.com", "X-Forwarded-Uri", "/login?next=/home"}

	// The login route, keyed by the peer (127.0.0.1; X-Forwarded-For counts
	// only behind trusted proxies). startApp gives the test its own
	// redis-server, so the windows start empty. Both policies are shared by
	// routes keyed by different sources, so each key leads with its sources
	// ("ip+127.0.0.1"; TestForwardAuthKeySourcesNamespaced).
	for i := 1; i <= 2; i++ {
		r := fa(t, app, "/forward-auth", login...)
		if r.status != 200 || r.raw != "" || r.header.Get("RateLimit-Policy") != `"login";q=2;w=60` ||
			r.header.Get("RateLimit") != fmt.Sprintf(`"login";r=%d;t=60`, 2-i) || r.header.Get("Retry-After") != "" {
			t.Fatalf("login %d: %d %v %q", i, r.status, r.header, r.raw)
		}
	}
	r := fa(t, app, "/forward-auth", login...)
	if r.status != 429 || r.header.Get("Content-Type") != "application/problem+json" || r.header.Get("Retry-After") != "60" ||
		r.body["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" || r.body["key"] != "ip+127.0.0.1" ||
		r.body["policy"] != "login" || num(t, r, "status") != 429 || r.header.Get("RateLimit") != `"login";r=0;t=60` {
		t.Fatalf("login denied: %d %v %s", r.status, r.header, r.raw)
	}

	// The method and host must match too: a GET to /login matches no route.
	if r := fa(t, app, "/forward-auth", "X-Forwarded-Method", "GET", "X-Forwarded-Host", "api.example.com", "X-Forwarded-Uri", "/login"); r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Fatalf("unmatched: %d %v", r.status, r.header)
	}
	if r := fa(t, app, "/forward-auth", "X-Forwarded-Method", "POST", "X-Forwarded-Host", "other.example.com", "X-Forwarded-Uri", "/login"); r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Fatalf("other host: %d %v", r.status, r.header)
	}
	// A host on another port still matches a pattern without one.
	if r := fa(t, app, "/forward-auth", "X-Forwarded-Method", "POST", "X-Forwarded-Host", "API.example.com:8443", "X-Forwarded-Uri", "/login"); r.status != 429 {
		t.Fatalf("host with a port: %d %v", r.status, r.header)
	}

	// Without X-Forwarded-*: the request's own method, Host and path under the prefix.
	v1 := func(key string) response {
		t.Helper()
		return ask(t, "PUT", app.URL+"/forward-auth/v1/things?x=1", "api.example.com", "X-Api-Key", key)
	}
	if r := v1("k1"); r.status != 200 || r.header.Get("RateLimit-Policy") != `"api/1";q=1;w=1, "api/60";q=3;w=60` {
		t.Fatalf("v1: %d %v %s", r.status, r.header, r.raw)
	}
	r = v1("k1")
	if r.status != 403 || num(t, r, "status") != 403 || r.header.Get("Retry-After") != "1" || r.body["key"] != "header=X-Api-Key+k1" {
		t.Fatalf("v1 denied with the route's status: %d %v %s", r.status, r.header, r.raw)
	}
	if vp := r.body["violated-policies"].([]any); len(vp) != 1 || vp[0] != "api/1" {
		t.Fatalf("violated-policies %v", vp)
	}
	if r := v1("k2"); r.status != 200 {
		t.Fatalf("another API key is another window: %d", r.status)
	}
	// A missing key source is a 400 naming it.
	r = ask(t, "GET", app.URL+"/forward-auth/v1/x", "api.example.com")
	if r.status != 400 || !strings.Contains(r.raw, `"field":"header:X-Api-Key"`) {
		t.Fatalf("missing header: %d %s", r.status, r.raw)
	}
	// ... unless the route allows it: then the request passes unlimited.
	if r := ask(t, "GET", app.URL+"/forward-auth/open/x", "h.example.com"); r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Fatalf("missingKey allow: %d %v", r.status, r.header)
	}
	// Values outside the key alphabet are hashed; sources join with +.
	ask(t, "GET", app.URL+"/forward-auth/open/x", "h.example.com", "X-Api-Key", "a key with spaces")
	r = ask(t, "GET", app.URL+"/forward-auth/open/x", "h.example.com", "X-Api-Key", "a key with spaces")
	sum := sha256.Sum256([]byte("a key with spaces"))
	if want := "header=X-Api-Key/host+sha256:" + hex.EncodeToString(sum[:])[:32] + "+h.example.com"; r.status != 429 || r.body["key"] != want {
		t.Fatalf("hashed key: %d %s, want key %s", r.status, r.raw, want)
	}
	// A route's cost.
	r = fa(t, app, "/forward-auth", "X-Forwarded-Uri", "/costly/a")
	if r.status != 200 || r.header.Get("RateLimit") != `"login";r=0;t=60` {
		t.Fatalf("cost 2: %d %v", r.status, r.header)
	}

	// Every decision was an ordinary check: counted.
	m := metrics(t, app)
	for _, line := range []string{
		`ratescope_decisions_total{outcome="allowed",policy="login"} 3`,
		`ratescope_decisions_total{outcome="denied",policy="login"} 2`,
		`ratescope_decisions_total{outcome="allowed",policy="api"} 3`,
		`ratescope_decisions_total{outcome="denied",policy="api"} 2`,
	} {
		if !strings.Contains(m, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

// TestForwardAuthKeysInjective: with header:X-A+header:X-B, the values
// (alice+x, y) and (alice, x+y) are two windows, as are (a:b) and (a, b) of
// routes sharing a policy (whose keys therefore lead with their sources).
func TestForwardAuthKeysInjective(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, `
policies:
  - {name: pair, rules: ["1/1m"]}
routes:
  - match: {pathPrefix: /two}
    policy: pair
    key: header:X-A+header:X-B
  - match: {pathPrefix: /one}
    policy: pair
    key: header:X-A
`))
	two := func(a, b string) response {
		t.Helper()
		return fa(t, app, "/forward-auth/two", "X-A", a, "X-B", b)
	}
	if r := two("alice+x", "y"); r.status != 200 {
		t.Fatalf("(alice+x, y): %d %s", r.status, r.raw)
	}
	if r := two("alice", "x+y"); r.status != 200 {
		t.Fatalf("(alice, x+y) shares the window of (alice+x, y): %d %s", r.status, r.raw)
	}
	if r := two("alice", "x+y"); r.status != 429 || r.body["key"] != "header=X-A/header=X-B+alice+sha256:cb4c3af716b8b9310afb0276c0c84d2c" {
		t.Fatalf("(alice, x+y) again: %d %s", r.status, r.raw)
	}
	if r := two("a", "b"); r.status != 200 {
		t.Fatalf("(a, b): %d %s", r.status, r.raw)
	}
	if r := fa(t, app, "/forward-auth/one", "X-A", "a+b"); r.status != 200 {
		t.Fatalf("(a+b) on the one-header route shares the window of (a, b): %d %s", r.status, r.raw)
	}
}

// TestForwardAuthBehindTrustedProxies: only trusted peers may ask; the
// client is the rightmost untrusted X-Forwarded-For hop; unmatched requests
// may be denied; decisions stream to viewers like any check.
func TestForwardAuthBehindTrustedProxies(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, `
trustedProxies: ["127.0.0.0/8"]
unmatched: deny
policies:
  - {name: login, rules: ["1/1m"]}
routes:
  - match: {pathPrefix: /login}
    policy: login
`))
	v := watch(t, app, "key=203.0.113.5&policy=login", nil)
	v.next("snapshot", nil)
	xff := func(chain string) response {
		return fa(t, app, "/forward-auth/login", "X-Forwarded-For", chain)
	}
	if r := xff("203.0.113.5"); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	d := v.next("decision", nil)
	if d["key"] != "203.0.113.5" || d["allowed"] != true {
		t.Fatalf("decision %v", d)
	}
	if r := xff("198.51.100.1, 203.0.113.5"); r.status != 429 || r.body["key"] != "203.0.113.5" {
		t.Fatalf("spoofed leftmost: %d %s", r.status, r.raw)
	}
	if d := v.next("decision", nil); d["allowed"] != false {
		t.Fatalf("decision %v", d)
	}
	if r := xff("203.0.113.5, 203.0.113.6"); r.status != 200 {
		t.Fatalf("another client: %d %s", r.status, r.raw)
	}
	if r := xff("2001:db8:1:2::99, 127.0.0.9"); r.status != 200 {
		t.Fatalf("IPv6 client: %d %s", r.status, r.raw)
	}
	// The /64 in CIDR form holds ":", outside the joined key's alphabet: hashed.
	if r := xff("[2001:db8:1:2:ffff::1]:5555"); r.status != 429 || r.body["key"] != "sha256:7437dddbc0275bcfe536fa291fb82060" {
		t.Fatalf("IPv6 client of the same /64: %d %s", r.status, r.raw)
	}
	if r := fa(t, app, "/forward-auth/elsewhere"); r.status != 403 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("unmatched: deny: %d %s", r.status, r.raw)
	}

	strict := startApp(t, nil, "--trusted-proxies", "10.0.0.0/8", "--config", writeConfig(t, `
routes:
  - match: {pathPrefix: /}
    policy: demo
`))
	if r := fa(t, strict, "/forward-auth", "X-Forwarded-For", "10.0.0.1"); r.status != 403 || r.header.Get("RateLimit") != "" {
		t.Fatalf("an untrusted peer asked: %d %s", r.status, r.raw)
	}
}

// attackerSpellings are paths that a backend serves as /login (or would
// after decoding, resolving dot segments, merging slashes or dropping
// ;params) but that a raw prefix match does not see as /login.
var attackerSpellings = []string{
	"/%6Cogin", "/%6cogin", "//login", "/./login", "/x/../login", "/login;x", "/x/..;/login",
	"/x/%2e%2e/login", "/x/%2E%2E/login", "/%2Flogin", "/x%2F..%2Flogin", "/login?next=/home",
}

// TestForwardAuthCanonicalSpellings: every spelling of a path is limited
// with its route, in both forms (X-Forwarded-* and the /forward-auth/<path>
// prefix), with the host in any case, with a port or a trailing dot; the path
// matches case-sensitively unless the route says ignoreCase; a malformed
// escape is 400 naming where the path came from.
func TestForwardAuthCanonicalSpellings(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, `
policies:
  - {name: login, rules: ["1/1m"]}
  - {name: admin, rules: ["1/1m"]}
  - {name: bypath, rules: ["1/1m"]}
routes:
  - match: {host: API.Example.com., methods: [post], pathPrefix: /login}
    policy: login
  - match: {pathPrefix: /admin/}
    ignoreCase: true
    policy: admin
  - match: {pathPrefix: /pk/}
    policy: bypath
    key: path
`))
	viaHeaders := func(method, host, uri string) response {
		t.Helper()
		return fa(t, app, "/forward-auth", "X-Forwarded-Method", method, "X-Forwarded-Host", host, "X-Forwarded-Uri", uri)
	}
	viaPrefix := func(method, host, uri string) response {
		t.Helper()
		return askRaw(t, method, app.URL, "/forward-auth"+uri, host)
	}
	if r := viaHeaders("POST", "api.example.com", "/login"); r.status != 200 || r.header.Get("RateLimit") == "" {
		t.Fatalf("first login: %d %v %s", r.status, r.header, r.raw)
	}
	for _, uri := range attackerSpellings {
		for _, host := range []string{"api.example.com", "API.EXAMPLE.COM", "api.example.com.", "api.example.com:8443", "Api.Example.Com.:443"} {
			for _, method := range []string{"POST", "post"} {
				if r := viaHeaders(method, host, uri); r.status != 429 || r.body["policy"] != "login" {
					t.Errorf("headers %s %s %s slipped past the login route: %d %s", method, host, uri, r.status, r.raw)
				}
			}
			if r := viaPrefix("POST", host, uri); r.status != 429 || r.body["policy"] != "login" {
				t.Errorf("prefix POST %s %s slipped past the login route: %d %s", host, uri, r.status, r.raw)
			}
		}
	}
	// Paths compare case-sensitively by default; other paths and methods are
	// not the route's.
	for _, uri := range []string{"/LOGIN", "/Login", "/logi", "/x/login", "/%2e%2e%2flogout"} {
		if r := viaHeaders("POST", "api.example.com", uri); r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Errorf("%s matched the login route: %d %v", uri, r.status, r.header)
		}
	}
	if r := viaHeaders("GET", "api.example.com", "/login"); r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Errorf("GET matched a POST route: %d %v", r.status, r.header)
	}

	// ignoreCase: any letter case of the prefix is the route's.
	if r := viaHeaders("GET", "h", "/Admin/users"); r.status != 200 || r.header.Get("RateLimit") == "" {
		t.Fatalf("first admin: %d %v %s", r.status, r.header, r.raw)
	}
	for _, uri := range []string{"/admin/users", "/ADMIN/x", "/%61dmin/", "//AdMiN//x", "/x/../admin;y/"} {
		if r := viaPrefix("GET", "h", uri); r.status != 429 || r.body["policy"] != "admin" {
			t.Errorf("%s slipped past the ignoreCase route: %d %s", uri, r.status, r.raw)
		}
	}

	// The path key source reads the canonical path: one window for every spelling.
	if r := viaHeaders("GET", "h", "/pk/a"); r.status != 200 {
		t.Fatalf("first pk: %d %s", r.status, r.raw)
	}
	for _, uri := range []string{"/pk/%61", "/pk//a", "/pk/./a;x", "/pk/b/../a?q"} {
		if r := viaPrefix("GET", "h", uri); r.status != 429 || r.body["key"] != "/pk/a" {
			t.Errorf("%s: %d %s, want a denial keyed /pk/a", uri, r.status, r.raw)
		}
	}

	// A malformed escape is the caller's mistake: 400 naming the field.
	for _, uri := range []string{"/%zzlogin", "/login%", "/login%2"} {
		r := viaHeaders("POST", "api.example.com", uri)
		if r.status != 400 || !strings.Contains(r.raw, `"field":"X-Forwarded-Uri"`) {
			t.Errorf("malformed %s: %d %s", uri, r.status, r.raw)
		}
	}
	if r := askRaw(t, "POST", app.URL, "/forward-auth/%zzlogin", "api.example.com"); r.status != 400 {
		t.Errorf("malformed escape under the prefix: %d %s", r.status, r.raw)
	}
}

// askRaw sends a request whose target is exactly rawPath, as a client that
// does not clean paths (curl --path-as-is) sends it.
func askRaw(t testing.TB, method, base, rawPath, host string, header ...string) response {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, rawPath, host)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&req, "%s: %s\r\n", header[i], header[i+1])
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawPath, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := response{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/") {
		if err := json.Unmarshal(b, &out.body); err != nil {
			t.Fatalf("%s %s: body is not a JSON object: %q", method, rawPath, b)
		}
	}
	return out
}
