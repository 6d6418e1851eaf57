package e2e_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

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
	// Fresh policy names: fresh windows even on a shared Redis.
	policy := "fa-" + uuid.NewString()[:8]
	conf := fmt.Sprintf(`
trustedProxies: ["127.0.0.1/32"]
policies:
  - name: %[1]s
    rules: ["%[2]d/1m"]
routes:
  - match: {pathPrefix: /caddy/}
    policy: %[1]s
    key: ip
  - match: {pathPrefix: /nginx/, methods: [GET]}
    policy: %[1]s
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
				if tc.name == "nginx" && a.header.Get("RateLimit") != fmt.Sprintf(`"%s";r=%d;t=60`, policy, limit-i) {
					t.Fatalf("request %d: RateLimit %q", i, a.header.Get("RateLimit"))
				}
			}
			a := through(t, url, alice)
			retry, err := strconv.Atoi(a.header.Get("Retry-After"))
			if a.status != 429 || err != nil || retry < 1 || retry > 60 || a.header.Get("Content-Type") != tc.ctype ||
				!strings.Contains(a.body, "quota-exceeded") || !strings.HasPrefix(a.header.Get("RateLimit"), `"`+policy+`";r=0;t=`) {
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
