package static_test

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/static"
)

// testIDs are the data-testid values of SPEC §5 (and their parts) that the
// page's script must drive; a rename on one side only breaks the page silently.
var testIDs = []string{
	"clock", "ring", "timeline", "timeline-entry", "cutoff", "count",
	"send", "boundary-test", "boundary-result", "reset",
	"log", "log-entry", "race-naive", "race-atomic", "race-result",
	"key", "policy", "viewers", "status",
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(static.FS, name)
	if err != nil {
		t.Fatalf("failed to read embedded %s: %v", name, err)
	}
	if len(b) == 0 {
		t.Fatalf("embedded %s is empty", name)
	}
	return string(b)
}

func TestEmbedsAssets(t *testing.T) {
	for _, name := range []string{"app.js", "app.css", "favicon.svg"} {
		readFile(t, name)
	}
}

func TestScriptReferencesEveryTestID(t *testing.T) {
	js := readFile(t, "app.js")
	for _, id := range testIDs {
		if !strings.Contains(js, "'"+id+"'") && !strings.Contains(js, `"`+id+`"`) {
			t.Errorf("app.js never mentions testid %q", id)
		}
	}
}

func TestScriptIsSelfContained(t *testing.T) {
	js := readFile(t, "app.js")
	if !strings.Contains(js, "'use strict'") {
		t.Error("app.js is not strict mode")
	}
	// The CSP allows only 'self': no CDNs, no eval, no HTML injection.
	for _, bad := range []string{"http://", "https://", "eval(", "new Function", "innerHTML", "document.write", "import "} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js contains %q", bad)
		}
	}
	css := readFile(t, "app.css")
	for _, bad := range []string{"@import", "url(http", "url(//"} {
		if strings.Contains(css, bad) {
			t.Errorf("app.css contains %q", bad)
		}
	}
}
