package e2e_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/proxytest"
)

// readmeBlock returns the README's one fenced block of lang that holds marker.
func readmeBlock(t *testing.T, lang, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, m := range regexp.MustCompile("(?ms)^```"+lang+"\n(.*?)^```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], marker) {
			found = append(found, m[1])
		}
	}
	if len(found) != 1 {
		t.Fatalf("the README has %d ```%s blocks holding %q, want one", len(found), lang, marker)
	}
	return found[0]
}

// TestReadmeCaddyRecipe runs the README's "Put it in front of a proxy" as a
// newcomer does on one machine: ratescope with the printed config file on
// its embedded Redis, the printed Caddyfile (docs/proxies.md's, which
// TestReadmeProxyConfigsAreTheTestedOnes holds equal) with only its ports
// replaced, and a client on the same machine that sends nothing but the
// request. Five logins reach the app and show the client the RateLimit
// headers; the sixth is 429 with Retry-After and never reaches the app.
func TestReadmeCaddyRecipe(t *testing.T) {
	proxytest.Need(t, "caddy")
	conf := readmeBlock(t, "yaml", "trustedProxies:")
	file := filepath.Join(t.TempDir(), "ratescope.yaml")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	app := apptest.Start(t, map[string]string{"RATESCOPE_CHECK_TIMEOUT": "3s"}, "--config", file)
	be := &countingBackend{hits: map[string]int{}}
	backend := httptest.NewServer(be)
	defer backend.Close()
	proxy := proxytest.Caddy(t, app.Addr, strings.TrimPrefix(backend.URL, "http://"))
	defer func() {
		if t.Failed() {
			t.Logf("proxy log:\n%s\nserver log:\n%s", proxy.Logs(), app.Logs())
		}
	}()

	policy := `"login/60";q=5;w=60, "login/3600";q=20;w=3600`
	login := func() proxied {
		t.Helper()
		resp, err := http.Post(proxy.URL+"/login", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return proxied{resp.StatusCode, resp.Header, string(b)}
	}
	for i := 1; i <= 5; i++ {
		r := login()
		want := fmt.Sprintf(`"login/60";r=%d;t=60, "login/3600";r=%d;t=3600`, 5-i, 20-i)
		if r.status != 200 || r.body != "backend" || r.header.Get("RateLimit") != want || r.header.Get("RateLimit-Policy") != policy {
			t.Fatalf("login %d: %d %v %q, want 200 from the app with RateLimit %s", i, r.status, r.header, r.body, want)
		}
	}
	r := login()
	if r.status != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "quota-exceeded") ||
		!strings.HasPrefix(r.header.Get("RateLimit"), `"login/60";r=0;`) || r.header.Get("RateLimit-Policy") != policy {
		t.Fatalf("login 6: %d %v %s, want 429 with Retry-After and the RateLimit headers", r.status, r.header, r.body)
	}
	if n := be.count("/login"); n != 5 {
		t.Fatalf("the app saw %d logins, want 5", n)
	}
}
