package server

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsLabelledKeys: the keys docs/proxies.md prints beside the routes of
// a policy shared by different key sources are the keys those routes make,
// for a client at 203.0.113.7 with API key k1 on files.example.com.
func TestDocsLabelledKeys(t *testing.T) {
	b, err := os.ReadFile("../docs/proxies.md")
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], "ip/header=X-Api-Key") {
			block = m[1]
		}
	}
	if block == "" {
		t.Fatal("docs/proxies.md shows no routes with labelled keys")
	}
	var want []string
	for _, m := range regexp.MustCompile(`(?m)key: .*#\s*(\S+)\s*$`).FindAllStringSubmatch(block, -1) {
		want = append(want, m[1])
	}
	path := filepath.Join(t.TempDir(), "ratescope.yaml")
	if err := os.WriteFile(path, []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := newConfigStore(Config{ConfigFile: path}, newMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	routes := store.load().routes
	if len(routes) != len(want) || len(want) < 4 {
		t.Fatalf("%d routes and %d keys in the docs' example", len(routes), len(want))
	}
	r := httptest.NewRequest("GET", "/forward-auth", nil)
	r.RemoteAddr = "203.0.113.7:5555"
	r.Header.Set("X-Api-Key", "k1")
	o := original{method: "GET", host: "files.example.com", path: "/"}
	for i := range routes {
		got, missing, err := routeKey(&routes[i], r, o, store.load().trusted)
		if err != nil || missing != nil || got != want[i] {
			t.Errorf("route %d (%s): key %q (%v, %v), the docs say %q", i, routes[i].key, got, missing, err, want[i])
		}
	}
}
