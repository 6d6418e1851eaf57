package main

// The console snippets of the README and docs/ run as printed: each `$ curl`
// goes to a real ratescope (on a real redis-server), and its answer must have
// the printed status line, headers and JSON members.

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }

// consolePages are the pages whose ```console blocks are run. (docs/envoy.md's
// need grpcurl and Envoy's load tool, which this machine lacks.)
var consolePages = []string{
	"README.md", "docs/http-api.md", "docs/plans-and-tenants.md",
	"docs/choosing-a-limit.md", "docs/algorithms-and-lab.md",
}

// snippetAdmin is $ADMIN, the admin token the snippets send.
const snippetAdmin = "snippet-admin-token"

// consoleBlock finds a ```console block and the comment before it that says
// how to run it:
//
//	<!-- snippet: FLAGS      the block needs a fresh server with these flags
//	$ curl …                  set-up commands, run (and checked) first
//	-->
//
// or <!-- snippet: FLAGS --> on one line; FLAGS "fresh" is no flags.
// Without a comment (or with no FLAGS and no "fresh"), a block runs on the
// server of the block before it on its page; the first block of a page on a
// fresh server with no flags.
var consoleBlock = regexp.MustCompile("(?ms)(?:^<!-- snippet:([^\n]*?)(?: -->|\n(.*?)^-->)\n\n?)?^```console\n(.*?)^```")

// step is one printed command and the output printed under it.
type step struct {
	cmd    string
	output []string
}

// transcript splits printed console text into its commands (continued over
// lines ending in \) and their outputs; `$ #` lines are comments.
func transcript(text string) []step {
	var steps []step
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(line, "$ ") {
			if len(steps) > 0 && strings.TrimSpace(line) != "" {
				steps[len(steps)-1].output = append(steps[len(steps)-1].output, line)
			}
			continue
		}
		cmd := strings.TrimPrefix(line, "$ ")
		for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
			i++
			cmd += "\n" + lines[i]
		}
		if strings.HasPrefix(cmd, "#") {
			continue
		}
		steps = append(steps, step{cmd: cmd})
	}
	return steps
}

// TestConsoleSnippetsRun runs every ```console block of consolePages.
func TestConsoleSnippetsRun(t *testing.T) {
	redistest.Need(t, "curl") // the snippets call it; strict mode fails without it
	for _, page := range consolePages {
		t.Run(strings.TrimSuffix(page, ".md"), func(t *testing.T) {
			text := read(t, page)
			blocks := consoleBlock.FindAllStringSubmatch(text, -1)
			if len(blocks) == 0 {
				t.Fatalf("%s has no ```console block", page)
			}
			r := &snippetRun{t: t, page: page, vars: map[string]string{}}
			for i, b := range blocks {
				flags, setup, printed := strings.TrimSpace(b[1]), b[2], b[3]
				if r.app == nil || flags != "" {
					r.start(strings.TrimSpace(strings.TrimPrefix(flags, "fresh")))
				}
				for _, s := range append(transcript(setup), transcript(printed)...) {
					r.run(fmt.Sprintf("block %d", i+1), s)
				}
			}
		})
	}
}

type snippetRun struct {
	t    *testing.T
	page string
	app  *apptest.App
	// vars maps what a snippet printed to what this run got: an id printed
	// in one answer and sent in a later command, and <name> for a member.
	vars map[string]string
}

func (r *snippetRun) start(flags string) {
	r.t.Helper()
	args, err := shellWords(strings.ReplaceAll(flags, `"$ADMIN"`, snippetAdmin))
	if err != nil {
		r.t.Fatalf("%s: snippet flags %q: %v", r.page, flags, err)
	}
	redisURL := redistest.Start(r.t).URL
	r.app = apptest.Start(r.t, map[string]string{"REDIS_URL": redisURL, "RATESCOPE_CHECK_TIMEOUT": "3s"}, args...)
}

// statusMark ends what curl prints with the answer's status, for a command
// that does not print its status line.
const statusMark = "\n@@status="

func (r *snippetRun) run(where string, s step) {
	t := r.t
	t.Helper()
	if !strings.HasPrefix(s.cmd, "curl ") {
		t.Fatalf("%s, %s: `%s` is not a curl command; only curl is run", r.page, where, s.cmd)
	}
	cmd := strings.ReplaceAll(s.cmd, "localhost:8080", r.app.Addr)
	cmd = strings.ReplaceAll(cmd, "Bearer …", "Bearer "+snippetAdmin)
	for _, k := range slices.Sorted(maps.Keys(r.vars)) {
		cmd = strings.ReplaceAll(cmd, k, r.vars[k])
	}
	// The status goes first on the command line: a printed one may end in a comment.
	cmd = "curl -w '" + strings.ReplaceAll(statusMark, "\n", `\n`) + "%{http_code}' " + strings.TrimPrefix(cmd, "curl ")
	sh := exec.Command("sh", "-c", cmd)
	sh.Env = append(os.Environ(), "ADMIN="+snippetAdmin)
	out, err := sh.Output()
	got, codeText, ok := strings.Cut(string(out), statusMark)
	code, _ := strconv.Atoi(codeText)
	if err != nil || !ok || code == 0 {
		t.Fatalf("%s, %s: `%s` failed: %v\n%s", r.page, where, s.cmd, err, out)
	}
	var diffs []string
	fail := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	answer := got
	defer func() {
		if diffs != nil {
			t.Errorf("%s, %s: `%s`:\n%s\nprinted:\n%s\ngot (status %d):\n%s", r.page, where, s.cmd, strings.Join(diffs, "\n"), strings.Join(s.output, "\n"), code, answer)
		}
	}()
	printedBody := s.output
	if len(s.output) > 0 && strings.HasPrefix(s.output[0], "HTTP/") {
		head, body, _ := strings.Cut(got, "\r\n\r\n")
		lines := strings.Split(head, "\r\n")
		if lines[0] != s.output[0] {
			fail("status line %q, printed %q", lines[0], s.output[0])
		}
		headers := map[string]string{}
		for _, l := range lines[1:] {
			k, v, _ := strings.Cut(l, ": ")
			headers[strings.ToLower(k)] = v
		}
		i := 1
		for ; i < len(s.output) && strings.Contains(s.output[i], ": ") && !strings.HasPrefix(s.output[i], "{"); i++ {
			k, v, _ := strings.Cut(s.output[i], ": ")
			if g, ok := headers[strings.ToLower(k)]; !ok {
				fail("no %s header", k)
			} else if !volatileHeader[strings.ToLower(k)] && resetSeconds.ReplaceAllString(g, "t=…") != resetSeconds.ReplaceAllString(v, "t=…") {
				fail("%s: %s, printed %s", k, g, v)
			}
		}
		got, printedBody = body, s.output[i:]
	} else if len(s.output) == 0 && code >= 400 {
		fail("status %d; the snippet prints nothing, as for a success", code)
	}
	if len(printedBody) > 0 {
		r.compareBody(fail, printedBody, got)
	}
}

// volatileHeader are the headers whose value changes from run to run.
var volatileHeader = map[string]bool{"retry-after": true, "date": true, "content-length": true}

// resetSeconds is the part of a RateLimit field that counts down.
var resetSeconds = regexp.MustCompile(`t=\d+`)

// volatile reports whether a JSON member's value changes from run to run:
// times, durations and ids. Their names are checked, not their values.
func volatile(name string) bool {
	return (strings.HasSuffix(name, "Ms") && name != "windowMs") || name == "id" || name == "leaseId" || name == "detail"
}

// compareBody checks that the answer has the printed JSON members: all of
// them, recursively, for a whole printed document; each printed "name":value
// pair somewhere in the answer for one elided with "…".
func (r *snippetRun) compareBody(fail func(string, ...any), printed []string, got string) {
	joined := strings.Join(printed, "\n")
	joined = strings.ReplaceAll(joined, "\n ", "")
	var gotDoc map[string]any
	if err := json.Unmarshal([]byte(got), &gotDoc); err != nil {
		fail("the answer is not a JSON object: %v", err)
		return
	}
	r.remember(joined, gotDoc)
	if strings.Contains(joined, "…") {
		all := map[string][]string{}
		for _, m := range jsonPair.FindAllStringSubmatch(got, -1) {
			all[m[1]] = append(all[m[1]], m[2])
		}
		for _, m := range jsonPair.FindAllStringSubmatch(joined, -1) {
			if vals, ok := all[m[1]]; !ok {
				fail("no member %q", m[1])
			} else if !volatile(m[1]) && !slices.Contains(vals, m[2]) {
				fail("%q is %v, printed %s", m[1], vals, m[2])
			}
		}
		return
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(joined), &want); err != nil {
		fail("the printed answer is not JSON (elide with …): %v", err)
		return
	}
	for _, d := range subset("", want, gotDoc) {
		fail("%s", d)
	}
}

// jsonPair is a member with a scalar value, in JSON text.
var jsonPair = regexp.MustCompile(`"([A-Za-z-]+)":("(?:[^"\\]|\\.)*"|-?[0-9.]+|true|false|null)`)

// remember maps the ids the snippet printed to the ones this run got, and
// <name> to each string member's value, for the commands after it.
func (r *snippetRun) remember(printed string, got map[string]any) {
	for name, v := range got {
		s, ok := v.(string)
		if !ok {
			continue
		}
		r.vars["<"+name+">"] = s
		if volatile(name) {
			if m := regexp.MustCompile(`"` + name + `":"([^"…]+)"`).FindStringSubmatch(printed); m != nil {
				r.vars[m[1]] = s
			}
		}
	}
}

// subset lists how got lacks or differs from what want prints.
func subset(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v, printed an object", path, got)}
		}
		var diffs []string
		for k, wv := range w {
			gv, ok := g[k]
			switch {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("no member %s.%s", path, k))
			case !volatile(k):
				diffs = append(diffs, subset(path+"."+k, wv, gv)...)
			}
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %v, printed %v", path, got, want)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, subset(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return []string{fmt.Sprintf("%s: %v, printed %v", path, got, want)}
		}
		return nil
	}
}

// shellWords splits flags as sh would, for single and double quotes.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case '\'', '"':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("unclosed %c", c)
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
