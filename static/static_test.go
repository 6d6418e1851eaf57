package static_test

import (
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/static"
)

// testIDs are the data-testid values of SPEC §5 (and their parts) that the
// page's modules must drive; a rename on one side only breaks the page silently.
var testIDs = []string{
	"clock", "clock-utc", "ring", "timeline", "timeline-entry", "cutoff", "count",
	"send", "boundary-test", "boundary-result", "reset",
	"log", "log-entry", "race-naive", "race-atomic", "race-result",
	// Outcomes (SPEC §14): a lock, the log's refund button, the race's two more modes.
	"lock", "log-refund", "race-peekrecord", "race-reserverefund",
	"key", "policy", "viewers", "status", "rate", "algorithm",
	// The lab (SPEC §8); its per-algorithm testids are built from the names.
	"lab", "lab-limit", "lab-window", "lab-traffic", "lab-run", "lab-mark",
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

// modules returns every embedded JavaScript module by path: the page's
// parts in js/ and each algorithm's in js/algorithms/.
func modules(t *testing.T) map[string]string {
	t.Helper()
	names, err := fs.Glob(static.FS, "js/*.js")
	if err != nil {
		t.Fatal(err)
	}
	perAlgorithm, err := fs.Glob(static.FS, "js/algorithms/*.js")
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, perAlgorithm...)
	if len(names) < 2 {
		t.Fatalf("embedded modules: %v, want the page split by part", names)
	}
	out := map[string]string{}
	for _, n := range names {
		out[n] = readFile(t, n)
	}
	return out
}

func TestEmbedsAssets(t *testing.T) {
	for _, name := range []string{"js/main.js", "js/messages.js", "js/lab.js", "app.css", "lab.css", "favicon.svg"} {
		readFile(t, name)
	}
}

func TestModulesReferenceEveryTestID(t *testing.T) {
	var all strings.Builder
	for _, src := range modules(t) {
		all.WriteString(src)
	}
	js := all.String()
	for _, id := range testIDs {
		if !strings.Contains(js, "'"+id+"'") && !strings.Contains(js, `"`+id+`"`) {
			t.Errorf("no module mentions testid %q", id)
		}
	}
}

var importRE = regexp.MustCompile(`(?m)^\s*import\s[^;]*?from\s+'([^']+)';|\bimport\s*\(('\./[a-z-]+/' \+)?`)

// TestModulesAreSelfContained: the CSP allows only 'self', so no CDN, no
// eval, no HTML injection, and every import is another embedded module.
func TestModulesAreSelfContained(t *testing.T) {
	mods := modules(t)
	for name, js := range mods {
		for _, bad := range []string{"http://", "https://", "eval(", "new Function", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"} {
			if strings.Contains(js, bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
		for _, m := range importRE.FindAllStringSubmatch(js, -1) {
			if m[1] == "" && m[2] != "" { // import('./dir/' + name + '.js'): a module of that embedded folder
				dir := path.Join(path.Dir(name), strings.Trim(m[2], "' +"))
				if d, err := fs.Stat(static.FS, dir); err != nil || !d.IsDir() {
					t.Errorf("%s imports from %s, which is not embedded", name, dir)
				}
				continue
			}
			if m[1] == "" {
				t.Errorf("%s imports dynamically: %q", name, m[0])
				continue
			}
			if !strings.HasPrefix(m[1], "./") && !strings.HasPrefix(m[1], "../") {
				t.Errorf("%s imports %q: only relative imports of embedded modules", name, m[1])
				continue
			}
			if _, ok := mods[path.Join(path.Dir(name), m[1])]; !ok {
				t.Errorf("%s imports %q, which is not embedded", name, m[1])
			}
		}
	}
	css := readFile(t, "app.css")
	for _, bad := range []string{"@import", "url(http", "url(//"} {
		if strings.Contains(css, bad) {
			t.Errorf("app.css contains %q", bad)
		}
	}
}

// messageTypeRE finds a message type compared or switched on as a string,
// e.g. m.type === 'tick' or case 'decision'.
var messageTypeRE = regexp.MustCompile(`\.type\s*[!=]==?\s*['"]|case\s+['"]`)

// TestMessageTypesReadInOneModule: the stream's message types are named in
// messages.js only; the other modules use its constants.
func TestMessageTypesReadInOneModule(t *testing.T) {
	mods := modules(t)
	defs := mods["js/messages.js"]
	for _, typ := range []string{"hello", "status", "tick", "snapshot", "decision", "reset", "race", "adjustment", "viewers"} {
		if !strings.Contains(defs, ": '"+typ+"'") {
			t.Errorf("messages.js does not define message type %q", typ)
		}
	}
	for name, js := range mods {
		if name == "js/messages.js" {
			continue
		}
		if m := messageTypeRE.FindString(js); m != "" {
			t.Errorf("%s reads a message type as a string (%q): use MSG from messages.js", name, m)
		}
	}
	main := mods["js/main.js"]
	for _, c := range []string{"HELLO", "STATUS", "TICK", "SNAPSHOT", "DECISION", "RESET", "RACE", "ADJUSTMENT", "VIEWERS"} {
		if !strings.Contains(main, "[MSG."+c+"]") {
			t.Errorf("main.js handles no MSG.%s", c)
		}
	}
}

// TestModulesStaySmall: one file per page part, each readable in one sitting.
func TestModulesStaySmall(t *testing.T) {
	var names []string
	for name, js := range modules(t) {
		names = append(names, name)
		if n := strings.Count(js, "\n"); n > 400 {
			t.Errorf("%s has %d lines; split it by concern", name, n)
		}
	}
	slices.Sort(names)
	t.Logf("modules: %v", names)
}

func TestETag(t *testing.T) {
	if !regexp.MustCompile(`^"[0-9a-f]{24}"$`).MatchString(static.ETag) {
		t.Errorf("ETag = %s, want a quoted hash", static.ETag)
	}
}
