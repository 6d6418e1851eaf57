package e2e_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/proxytest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// countingBackend is the service behind the proxy: it counts the requests
// that reached it, per path.
type countingBackend struct {
	mu   sync.Mutex
	hits map[string]int
}

func (b *countingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.hits[r.URL.Path]++
	b.mu.Unlock()
	io.WriteString(w, "backend")
}

func (b *countingBackend) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.hits {
		n += c
	}
	return n
}

func (b *countingBackend) count(path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[path]
}

type proxied struct {
	status int
	header http.Header
	body   string
}

// through sends one request through the proxy as a client behind a load
// balancer that wrote xff.
func through(t *testing.T, url, xff string) proxied {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return proxied{resp.StatusCode, resp.Header, string(b)}
}

// TestForwardAuthThroughProxies drives a real Caddy (forward_auth) and a real
// nginx (auth_request, 403 mapped to 429) in front of a backend: limit + 1
// requests give limit backend answers and a denial with Retry-After; clients
// differing only in X-Forwarded-For behind the trusted proxy are limited
// apart; a spoofed leftmost X-Forwarded-For value does not change the key.
func TestForwardAuthThroughProxies(t *testing.T) {
	const limit = 3
	// Fresh policy names: fresh windows even on a shared Redis. A policy
	// per proxy: one shared by routes keyed by different sources would lead
	// each key with its sources ("ip+203.0.113.10"), and the Caddy route
	// shows the plain key.
	policy := "fa-" + uuid.NewString()[:8]
	conf := fmt.Sprintf(`
trustedProxies: ["127.0.0.1/32"]
policies:
  - name: %[1]s-caddy
    rules: ["%[2]d/1m"]
  - name: %[1]s-nginx
    rules: ["%[2]d/1m"]
routes:
  - match: {pathPrefix: /caddy/}
    policy: %[1]s-caddy
    key: ip
  - match: {pathPrefix: /nginx/, methods: [GET]}
    policy: %[1]s-nginx
    key: ip+path
    denyStatus: 403
`, policy, limit)
	file := filepath.Join(t.TempDir(), "ratescope.yaml")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Check that both proxies exist before starting anything else.
	proxytest.Need(t, "caddy")
	proxytest.Need(t, "nginx")
	app := apptest.Start(t, map[string]string{"REDIS_URL": redistest.URL(t), "RATESCOPE_CHECK_TIMEOUT": "3s"}, "--config", file)
	be := &countingBackend{hits: map[string]int{}}
	backend := httptest.NewServer(be)
	defer backend.Close()
	backendAddr := strings.TrimPrefix(backend.URL, "http://")

	for _, tc := range []struct {
		name  string
		start func(testing.TB, string, string) *proxytest.Proxy
		ctype string // of the denial the client sees
	}{
		{"caddy", proxytest.Caddy, "application/problem+json"},
		{"nginx", proxytest.Nginx, "application/problem+json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := policy + "-" + tc.name
			proxy := tc.start(t, app.Addr, backendAddr)
			defer func() {
				if t.Failed() {
					t.Logf("proxy log:\n%s\nserver log:\n%s", proxy.Logs(), app.Logs())
				}
			}()
			path := "/" + tc.name + "/login"
			url := proxy.URL + path
			alice, bob := "203.0.113.10", "203.0.113.11"
			for i := 1; i <= limit; i++ {
				a := through(t, url, alice)
				if a.status != 200 || a.body != "backend" {
					t.Fatalf("request %d: %d %s", i, a.status, a.body)
				}
				// The client sees ratescope's headers on an allowed request
				// too, through either proxy.
				if a.header.Get("RateLimit") != fmt.Sprintf(`"%s";r=%d;t=60`, policy, limit-i) ||
					a.header.Get("RateLimit-Policy") != fmt.Sprintf(`"%s";q=%d;w=60`, policy, limit) {
					t.Fatalf("request %d: RateLimit %q, RateLimit-Policy %q", i, a.header.Get("RateLimit"), a.header.Get("RateLimit-Policy"))
				}
			}
			a := through(t, url, alice)
			retry, err := strconv.Atoi(a.header.Get("Retry-After"))
			if a.status != 429 || err != nil || retry < 1 || retry > 60 || a.header.Get("Content-Type") != tc.ctype ||
				!strings.Contains(a.body, "quota-exceeded") || !strings.HasPrefix(a.header.Get("RateLimit"), `"`+policy+`";r=0;t=`) ||
				a.header.Get("RateLimit-Policy") != fmt.Sprintf(`"%s";q=%d;w=60`, policy, limit) {
				t.Fatalf("request %d: %d %v %s", limit+1, a.status, a.header, a.body)
			}
			if n := be.count(path); n != limit {
				t.Fatalf("the backend answered %d requests, want %d", n, limit)
			}
			if tc.name == "caddy" && !strings.Contains(a.body, `"key":"`+alice+`"`) {
				t.Fatalf("the denial is not keyed by the client's address: %s", a.body)
			}

			// A spoofed leftmost value changes nothing: still alice, still denied.
			if a := through(t, url, "198.51.100.77, "+alice); a.status != 429 {
				t.Fatalf("spoofed leftmost X-Forwarded-For escaped the limit: %d %s", a.status, a.body)
			}
			// Claiming to be alice on the left does not make bob alice.
			if a := through(t, url, alice+", "+bob); a.status != 200 {
				t.Fatalf("bob, with alice spoofed leftmost: %d %s", a.status, a.body)
			}
			// Bob is limited apart from alice.
			for i := 2; i <= limit; i++ {
				if a := through(t, url, bob); a.status != 200 {
					t.Fatalf("bob's request %d: %d %s", i, a.status, a.body)
				}
			}
			if a := through(t, url, bob); a.status != 429 || a.header.Get("Retry-After") == "" {
				t.Fatalf("bob's request %d: %d %v", limit+1, a.status, a.header)
			}
			if n := be.count(path); n != 2*limit {
				t.Fatalf("the backend answered %d requests, want %d", n, 2*limit)
			}
		})
	}
}

// raw sends one request whose target is exactly target, as a client that does
// not clean paths (curl --path-as-is) sends it, with the given Host.
func raw(t *testing.T, proxyURL, method, target, host string) proxied {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", method, target, host)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, target, host, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return proxied{resp.StatusCode, resp.Header, string(b)}
}

// proxies are the real proxies the tests drive, with the configs of
// docs/proxies.md, and the denyStatus their routes need.
var proxies = []struct {
	name       string
	start      func(testing.TB, string, string) *proxytest.Proxy
	denyStatus int
}{
	{"caddy", proxytest.Caddy, 429},
	{"nginx", proxytest.Nginx, 403},
}

// TestProxiesCanonicalSpellings: behind real Caddy and nginx, once POST
// /login on api.example.com has used its limit, every spelling of that path
// and host is denied with the route's answer and never reaches the backend;
// a malformed escape is 400 and never reaches it either.
func TestProxiesCanonicalSpellings(t *testing.T) {
	proxytest.Need(t, "caddy")
	proxytest.Need(t, "nginx")
	for _, px := range proxies {
		t.Run(px.name, func(t *testing.T) {
			const limit = 2
			policy := "login-" + uuid.NewString()[:8]
			file := filepath.Join(t.TempDir(), "ratescope.yaml")
			conf := fmt.Sprintf(`
trustedProxies: ["127.0.0.1/32"]
policies:
  - {name: %s, rules: ["%d/1m"]}
routes:
  - match: {host: api.example.com, methods: [POST], pathPrefix: /login}
    policy: %[1]s
    denyStatus: %[3]d
  - match: {pathPrefix: /api/}
    policy: %[1]s
    key: header:X-Api-Key
    denyStatus: %[3]d
`, policy, limit, px.denyStatus)
			if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			app := apptest.Start(t, map[string]string{"REDIS_URL": redistest.URL(t), "RATESCOPE_CHECK_TIMEOUT": "3s"}, "--config", file)
			be := &countingBackend{hits: map[string]int{}}
			backend := httptest.NewServer(be)
			defer backend.Close()
			proxy := px.start(t, app.Addr, strings.TrimPrefix(backend.URL, "http://"))
			defer func() {
				if t.Failed() {
					t.Logf("proxy log:\n%s\nserver log:\n%s", proxy.Logs(), app.Logs())
				}
			}()
			for i := range limit {
				if r := raw(t, proxy.URL, "POST", "/login", "api.example.com"); r.status != 200 || r.body != "backend" {
					t.Fatalf("login %d: %d %s", i+1, r.status, r.body)
				}
			}
			total := be.total()
			for _, target := range []string{
				"/login", "/%6Cogin", "/%6cogin", "//login", "/./login", "/x/../login", "/login;x", "/x/..;/login",
				"/x/%2e%2e/login", "/x/%2E%2E/login", "/%2Flogin", "/x%2F..%2Flogin", "/login?next=/home",
			} {
				for _, host := range []string{"api.example.com", "API.Example.COM", "api.example.com.", "api.example.com:8443"} {
					r := raw(t, proxy.URL, "POST", target, host)
					if r.status != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "quota-exceeded") {
						t.Errorf("POST %s (Host %s): %d %v %s, want the route's 429", target, host, r.status, r.header, r.body)
					}
				}
			}
			if r := raw(t, proxy.URL, "POST", "/%zzlogin", "api.example.com"); r.status != 400 {
				t.Errorf("malformed escape: %d %s, want 400", r.status, r.body)
			}
			// A key source the request lacks is the client's mistake: 400
			// through either proxy (nginx's auth_request would make it 500).
			if r := raw(t, proxy.URL, "GET", "/api/x", "api.example.com"); r.status != 400 {
				t.Errorf("no X-Api-Key: %d %v %s, want 400", r.status, r.header, r.body)
			}
			// Another path is not the route's: it passes, and no RateLimit
			// header (nor Caddy's unfilled placeholder) reaches the client.
			if r := raw(t, proxy.URL, "POST", "/logout", "api.example.com"); r.status != 200 || r.body != "backend" ||
				r.header.Values("RateLimit") != nil || r.header.Values("RateLimit-Policy") != nil {
				t.Errorf("/logout: %d %v %s", r.status, r.header, r.body)
			}
			if n := be.total() - total; n != 1 {
				t.Errorf("the backend answered %d requests after the limit, want only /logout's", n)
			}
		})
	}
}

// TestProxiesWhenRatescopeFails: with ratescope answering 503 (its Redis is
// gone, fail-closed) or not reachable at all, each proxy answers 503 of its
// own — nginx not its HTML 500 page — and the backend sees nothing.
func TestProxiesWhenRatescopeFails(t *testing.T) {
	proxytest.Need(t, "caddy")
	proxytest.Need(t, "nginx")
	rdb := redistest.Start(t)
	app := apptest.Start(t, map[string]string{"REDIS_URL": rdb.URL, "RATESCOPE_CHECK_TIMEOUT": "200ms"}, "--config", writeFile(t, `
routes:
  - match: {pathPrefix: /}
    policy: default
`))
	rdb.Stop()
	down := closedAddr(t)
	be := &countingBackend{hits: map[string]int{}}
	backend := httptest.NewServer(be)
	defer backend.Close()
	for _, px := range proxies {
		for _, tc := range []struct{ name, auth string }{{"ratescope answers 503", app.Addr}, {"ratescope unreachable", down}} {
			t.Run(px.name+"/"+tc.name, func(t *testing.T) {
				proxy := px.start(t, tc.auth, strings.TrimPrefix(backend.URL, "http://"))
				r := raw(t, proxy.URL, "GET", "/x", "api.example.com")
				if r.status != 503 || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/problem+json" ||
					strings.Contains(strings.ToLower(r.body), "<html") {
					t.Errorf("%d %v %q, want 503 with Retry-After: 1 and no HTML page\nproxy log:\n%s", r.status, r.header, r.body, proxy.Logs())
				}
			})
		}
	}
	if n := be.total(); n != 0 {
		t.Errorf("the backend answered %d requests while ratescope could not decide", n)
	}
}

// closedAddr is a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ratescope.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
