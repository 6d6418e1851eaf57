package e2e_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/proxytest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// send sends one request through the proxy with the given Host and header
// lines (a name given twice is sent on two lines).
func send(t *testing.T, proxyURL, method, path, host string, header ...string) proxied {
	t.Helper()
	req, err := http.NewRequest(method, proxyURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return proxied{resp.StatusCode, resp.Header, string(b)}
}

// TestProxiesClientSentHeaders: behind real Caddy and nginx with the configs
// of docs/proxies.md, where the client itself is on a network the proxy
// trusts (a load balancer's, say), nothing a client sends slips past a route:
//   - its own X-Forwarded-Host, -Method or -Uri does not move a used-up POST
//     /login on api.example.com to another host, method or path;
//   - HEAD counts as the GET a route lists (the backend serves both);
//   - on a policy shared by an ip route and an X-Api-Key route, a client
//     sending another's address as its API key fills a window of its own,
//     not that client's.
func TestProxiesClientSentHeaders(t *testing.T) {
	proxytest.Need(t, "caddy")
	proxytest.Need(t, "nginx")
	for _, px := range proxies {
		t.Run(px.name, func(t *testing.T) {
			id := uuid.NewString()[:8]
			file := writeFile(t, fmt.Sprintf(`
trustedProxies: ["127.0.0.1/32"]
policies:
  - {name: login-%[1]s, rules: ["2/1m"]}
  - {name: feed-%[1]s, rules: ["2/1m"]}
  - {name: acct-%[1]s, rules: ["2/1m"]}
routes:
  - match: {host: api.example.com, methods: [POST], pathPrefix: /login}
    policy: login-%[1]s
    denyStatus: %[2]d
  - match: {methods: [GET], pathPrefix: /feed}
    policy: feed-%[1]s
    denyStatus: %[2]d
  - match: {pathPrefix: /me/}
    policy: acct-%[1]s
    key: ip
    denyStatus: %[2]d
  - match: {pathPrefix: /keyed/}
    policy: acct-%[1]s
    key: header:X-Api-Key
    denyStatus: %[2]d
`, id, px.denyStatus))
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
			const alice, bob = "203.0.113.10", "203.0.113.11"
			denied := func(what string, r proxied) {
				t.Helper()
				if r.status != 429 || r.header.Get("Retry-After") == "" {
					t.Errorf("%s: %d %v %q, want 429 with Retry-After", what, r.status, r.header, r.body)
				}
			}

			// Forwarded headers of the client's own.
			for i := 1; i <= 2; i++ {
				if r := send(t, proxy.URL, "POST", "/login", "api.example.com", "X-Forwarded-For", alice); r.status != 200 || r.body != "backend" {
					t.Fatalf("login %d: %d %s", i, r.status, r.body)
				}
			}
			for _, forged := range [][]string{
				{"X-Forwarded-Host", "other.example"},
				{"X-Forwarded-Host", "other.example", "X-Forwarded-Host", "api.example.com"},
				{"X-Forwarded-Method", "GET"},
				{"X-Forwarded-Uri", "/elsewhere"},
				{"X-Forwarded-Host", "other.example", "X-Forwarded-Method", "GET", "X-Forwarded-Uri", "/elsewhere"},
			} {
				denied(fmt.Sprintf("POST /login with %q", forged),
					send(t, proxy.URL, "POST", "/login", "api.example.com", append([]string{"X-Forwarded-For", alice}, forged...)...))
			}
			if n := be.count("/login"); n != 2 {
				t.Errorf("the backend answered /login %d times, want 2", n)
			}

			// HEAD on a GET route: counted in its window (nginx shows the
			// RateLimit fields to the client; Caddy only to the backend).
			for i, method := range []string{"GET", "HEAD"} {
				r := send(t, proxy.URL, method, "/feed", "api.example.com", "X-Forwarded-For", alice)
				if r.status != 200 {
					t.Fatalf("%s /feed: %d %v", method, r.status, r.header)
				}
				if want := fmt.Sprintf(`"feed-%s";r=%d;t=60`, id, 1-i); px.name == "nginx" && r.header.Get("RateLimit") != want {
					t.Fatalf("%s /feed: RateLimit %q, want %s", method, r.header.Get("RateLimit"), want)
				}
			}
			denied("GET /feed after GET and HEAD", send(t, proxy.URL, "GET", "/feed", "api.example.com", "X-Forwarded-For", alice))
			denied("HEAD /feed after GET and HEAD", send(t, proxy.URL, "HEAD", "/feed", "api.example.com", "X-Forwarded-For", alice))
			if n := be.count("/feed"); n != 2 {
				t.Errorf("the backend answered /feed %d times, want 2", n)
			}

			// Another's address as one's API key.
			for i := 1; i <= 2; i++ {
				if r := send(t, proxy.URL, "GET", "/keyed/x", "api.example.com", "X-Forwarded-For", bob, "X-Api-Key", alice); r.status != 200 {
					t.Fatalf("bob with API key %s, request %d: %d %s", alice, i, r.status, r.body)
				}
			}
			denied("bob's third request with that API key", send(t, proxy.URL, "GET", "/keyed/x", "api.example.com", "X-Forwarded-For", bob, "X-Api-Key", alice))
			if r := send(t, proxy.URL, "GET", "/me/x", "api.example.com", "X-Forwarded-For", alice); r.status != 200 || r.body != "backend" {
				t.Errorf("alice, after bob sent her address as his API key: %d %q", r.status, r.body)
			}
		})
	}
}
