package server_test

import (
	"strings"
	"testing"

	"github.com/ratescope/ratescope/static"
)

// TestStaticCaching: what the page links carries ?v= and is cached for a
// day; modules imported by other modules carry none and are revalidated
// against the build's ETag, so a browser never runs one release's main.js
// with another's modules.
func TestStaticCaching(t *testing.T) {
	app := startApp(t, nil)
	r, body := doRaw(t, "GET", app.URL+"/static/js/main.js?v=abc")
	if r.status != 200 || r.header.Get("Cache-Control") != "public, max-age=86400" {
		t.Errorf("versioned main.js: %d, Cache-Control %q", r.status, r.header.Get("Cache-Control"))
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("main.js served as %q: browsers run modules only with a JavaScript type", ct)
	}
	if !strings.Contains(body, "from './messages.js'") {
		t.Errorf("main.js does not import messages.js by relative URL")
	}
	r, _ = doRaw(t, "GET", app.URL+"/static/js/messages.js")
	if r.status != 200 || r.header.Get("Cache-Control") != "no-cache" || r.header.Get("ETag") != static.ETag {
		t.Errorf("imported module: %d, Cache-Control %q, ETag %q; want 200, no-cache, %s", r.status, r.header.Get("Cache-Control"), r.header.Get("ETag"), static.ETag)
	}
	if r, _ := doRaw(t, "GET", app.URL+"/static/js/messages.js", "If-None-Match", static.ETag); r.status != 304 {
		t.Errorf("revalidating an unchanged module: %d, want 304", r.status)
	}
	if r, _ := doRaw(t, "GET", app.URL+"/static/js/messages.js", "If-None-Match", `"an-older-build"`); r.status != 200 {
		t.Errorf("revalidating a module of another build: %d, want 200", r.status)
	}
}
