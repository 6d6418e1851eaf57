package e2e_test

// Helpers of the browser tests: one headless Chromium shared by the package
// (started on first use, stopped by TestMain), a tab per page with a watch on
// its console, and polling of the page's state.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/ratescope/ratescope/internal/redistest"
)

// Deadlines, generous for a loaded two-core machine.
const (
	waitTimeout   = 20 * time.Second // for a condition on the page to hold
	actionTimeout = 30 * time.Second // for one browser action (navigate, click, evaluate)
	pollEvery     = 50 * time.Millisecond
)

func TestMain(m *testing.M) {
	code := redistest.Run(m) // and says once what a missing program cost
	shared.stop()
	os.Exit(code)
}

// sharedBrowser is the one Chromium of the package.
type sharedBrowser struct {
	once   sync.Once
	ctx    context.Context // a browser context without a timeout
	cancel func()
	err    error
	out    lockedBuffer // Chromium's own output, for a failed start
	dirs   []string
}

var shared sharedBrowser

// browser returns the context of the shared browser, starting it on first
// use. It skips the test when chromium is missing (fails under
// RATESCOPE_TEST_STRICT=1).
func browser(t *testing.T) context.Context {
	t.Helper()
	path := redistest.Need(t, "chromium")
	shared.once.Do(func() { shared.start(path) })
	if shared.err != nil {
		t.Fatalf("failed to start chromium: %v", shared.err)
	}
	return shared.ctx
}

func (b *sharedBrowser) start(path string) {
	// The profile and TMPDIR outlive any single test, so they are not
	// t.TempDir()s: TestMain removes them after the browser has exited.
	profile, err := os.MkdirTemp("", "ratescope-e2e-profile-")
	if err != nil {
		b.err = err
		return
	}
	tmp, err := os.MkdirTemp("", "ratescope-e2e-tmp-")
	if err != nil {
		b.err = err
		_ = os.RemoveAll(profile)
		return
	}
	b.dirs = []string{profile, tmp}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.Env("TMPDIR="+tmp),
		chromedp.CombinedOutput(&b.out),
	)
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	b.ctx = ctx
	b.cancel = func() { cancel(); allocCancel() }
	// The first Do binds the browser's life to ctx, which has no timeout; a
	// start that hangs is given up on here instead.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err = <-started:
	case <-time.After(60 * time.Second):
		err = errors.New("chromium did not start within 60s")
	}
	if err != nil {
		b.err = fmt.Errorf("%w\n%s", err, b.out.String())
		b.cancel()
	}
}

func (b *sharedBrowser) stop() {
	if b.cancel != nil {
		b.cancel()
	}
	for _, d := range b.dirs {
		_ = os.RemoveAll(d)
	}
}

// lockedBuffer collects Chromium's output, written from another goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// uniqueKey returns a client key no other test (or run) uses.
func uniqueKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "e2e-" + hex.EncodeToString(b)
}

// tab is one page in the shared browser.
type tab struct {
	t       *testing.T
	name    string
	ctx     context.Context // the tab's context, without a timeout
	cancel  context.CancelFunc
	console *consoleWatch
	closed  bool
}

// openTab opens a new tab as a child of parent (the browser context, or a
// tab's context for a second tab of the same browser), watches its console
// from the start, and closes it when the test ends, after checking that the
// console saw no exception, CSP violation or error.
func openTab(t *testing.T, parent context.Context, name string) *tab {
	t.Helper()
	cw := &consoleWatch{name: name}
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithListener(cw.listen))
	tb := &tab{t: t, name: name, ctx: ctx, cancel: cancel, console: cw}
	// Creating the target binds it to ctx, so this first call has no
	// timeout of its own; it only opens a blank tab.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatalf("%s: failed to open a tab: %v", name, err)
	}
	t.Cleanup(tb.close)
	// Record CSP violations as the page sees them too: the script runs in
	// every new document before the page's own scripts, outside its CSP.
	tb.do("install the CSP recorder", func(ctx context.Context) error {
		_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: cspRecorderJS,
		})
		return err
	})
	return tb
}

const cspRecorderJS = `window.__e2eCSP = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__e2eCSP.push(e.effectiveDirective + ' blocked ' + (e.blockedURI || 'inline') + ' at ' + e.sourceFile + ':' + e.lineNumber);
});`

// do runs f with a context that times out after actionTimeout.
func (tb *tab) do(what string, f func(ctx context.Context) error) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		tb.t.Fatalf("%s: %s: %v", tb.name, what, err)
	}
}

// run runs chromedp steps with a timeout.
func (tb *tab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	tb.do(what, func(ctx context.Context) error { return chromedp.Do(ctx, steps...) })
}

// navigate loads url and waits until the page's stream is live.
func (tb *tab) navigate(url string) {
	tb.t.Helper()
	tb.run("navigate to "+url, chromedp.Navigate(url))
	tb.waitFor("the stream is live", func(s pageState) bool { return s.Status == "live" })
}

// click clicks the element with this data-testid.
func (tb *tab) click(testid string) {
	tb.t.Helper()
	tb.run("click "+testid, chromedp.Click(byTestID(testid), chromedp.NodeVisible))
}

func byTestID(id string) chromedp.CSS {
	return chromedp.CSS(`[data-testid="` + id + `"]`)
}

// evaluate runs a JavaScript expression in the page and returns its value.
func evaluate[T any](tb *tab, expr string, opts ...chromedp.EvaluateOption) T {
	tb.t.Helper()
	var v T
	tb.do("evaluate "+firstLine(expr), func(ctx context.Context) error {
		var err error
		v, err = chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
		return err
	})
	return v
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}

// pageState is what the tests read from the page, by data-testid only.
type pageState struct {
	Clock    string     `json:"clock"`
	Count    string     `json:"count"`
	Status   string     `json:"status"`
	Viewers  string     `json:"viewers"`
	Boundary string     `json:"boundary"`
	RingMs   *int64     `json:"ringMs"`  // data-remaining-ms; nil when missing or not a number
	IDs      []string   `json:"ids"`     // data-id of each timeline-entry
	EntryMs  []int64    `json:"entryMs"` // data-ms of each, in the same order
	Log      []logEntry `json:"log"`
	ScrollW  int64      `json:"scrollW"` // document.documentElement.scrollWidth
	InnerW   int64      `json:"innerW"`
}

type logEntry struct {
	Status string `json:"status"` // the one child whose text is an HTTP status, e.g. "429"
	Text   string `json:"text"`
}

const stateJS = `(() => {
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  const txt = (id) => { const e = q(id); return e ? e.textContent.trim() : null; };
  const ring = q('ring');
  const rms = ring ? Number(ring.getAttribute('data-remaining-ms')) : NaN;
  const entries = Array.from(document.querySelectorAll('[data-testid="timeline"] [data-testid="timeline-entry"]'));
  const log = Array.from(document.querySelectorAll('[data-testid="log"] [data-testid="log-entry"]'), (e) => ({
    status: Array.from(e.querySelectorAll('*'), (c) => c.textContent.trim()).find((s) => /^[1-5][0-9][0-9]$/.test(s)) || '',
    text: e.textContent.replace(/\s+/g, ' ').trim(),
  }));
  return {
    clock: txt('clock'), count: txt('count'), status: txt('status'), viewers: txt('viewers'),
    boundary: txt('boundary-result'),
    ringMs: Number.isFinite(rms) ? Math.round(rms) : null,
    ids: entries.map((e) => e.getAttribute('data-id')),
    entryMs: entries.map((e) => Number(e.getAttribute('data-ms')) || 0),
    log: log,
    scrollW: document.documentElement.scrollWidth,
    innerW: window.innerWidth,
  };
})()`

// state reads the page's state once.
func (tb *tab) state() pageState {
	tb.t.Helper()
	return evaluate[pageState](tb, stateJS)
}

// waitFor polls the page's state until cond holds, and fails the test with
// the last state seen when it does not within waitTimeout.
func (tb *tab) waitFor(what string, cond func(pageState) bool) pageState {
	tb.t.Helper()
	return tb.waitCheck(waitTimeout, what, func(s pageState) error {
		if cond(s) {
			return nil
		}
		return errors.New("not yet")
	})
}

// waitCheck polls the page's state until check returns nil, for at most d,
// and fails the test with check's last error and the last state seen.
func (tb *tab) waitCheck(d time.Duration, what string, check func(pageState) error) pageState {
	tb.t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := tb.state()
		err := check(s)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			j, _ := json.MarshalIndent(s, "", "  ")
			tb.t.Fatalf("%s: waited %s for %s: %v; the page shows:\n%s", tb.name, d, what, err, j)
		}
		time.Sleep(pollEvery)
	}
}

// waitView evaluates js on the page until check accepts what it returns,
// for at most d, and fails the test with check's last error and the last
// view: the poll every feature's e2e shares, each with a view of its own.
func waitView[V any](tb *tab, d time.Duration, js, what string, check func(V) error) V {
	tb.t.Helper()
	deadline := time.Now().Add(d)
	for {
		v := evaluate[V](tb, js)
		err := check(v)
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("%s: waited %s for %s: %v; the page shows %+v", tb.name, d, what, err, v)
		}
		time.Sleep(pollEvery)
	}
}

// close checks the tab's console and closes it before the test ends.
func (tb *tab) close() {
	tb.t.Helper()
	if tb.closed {
		return
	}
	tb.closed = true
	tb.checkConsole()
	tb.cancel()
}

// consoleWatch records what a tab writes to its console. Its listen func
// runs in the tab's message loop: it only appends.
type consoleWatch struct {
	name string

	mu       sync.Mutex
	problems []string // exceptions, CSP violations, console.error, error log entries
	notes    []string // everything else worth seeing in -v output
}

// Expected error entries: the browser logs every 4xx/5xx answer to fetch as
// an error, and the boundary test gets a 429 on purpose.
var expectedLogError = regexp.MustCompile(`status of 429 \(Too Many Requests\)`)

func (c *consoleWatch) listen(ev any) {
	var problem, note string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		if d == nil {
			problem = "exception"
			break
		}
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		problem = fmt.Sprintf("exception at %s:%d:%d: %s", d.URL, d.LineNumber+1, d.ColumnNumber+1, text)
	case *runtime.EventConsoleAPICalled:
		var parts []string
		for _, a := range ev.Args {
			switch {
			case a == nil:
			case len(a.Value) > 0:
				parts = append(parts, string(a.Value))
			default:
				parts = append(parts, a.Description)
			}
		}
		msg := fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(parts, " "))
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			problem = msg
		} else {
			note = msg
		}
	case *log.EventEntryAdded:
		e := ev.Entry
		if e == nil {
			break
		}
		msg := fmt.Sprintf("log %s/%s: %s (%s)", e.Source, e.Level, e.Text, e.URL)
		switch {
		case e.Source == log.EntrySourceSecurity || strings.Contains(e.Text, "Content Security Policy"):
			problem = "CSP: " + msg
		case e.Level == log.EntryLevelError && !expectedLogError.MatchString(e.Text):
			problem = msg
		default:
			note = msg
		}
	}
	if problem == "" && note == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if problem != "" {
		c.problems = append(c.problems, problem)
	} else {
		c.notes = append(c.notes, note)
	}
}

// take returns and forgets what was recorded so far.
func (c *consoleWatch) take() (problems, notes []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	problems, notes = c.problems, c.notes
	c.problems, c.notes = nil, nil
	return problems, notes
}

// cspViolations returns (and clears) the violations the page itself saw.
func (tb *tab) cspViolations() ([]string, error) {
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`(() => { const v = window.__e2eCSP || []; window.__e2eCSP = []; return v; })()`))
}

// checkConsole fails the test on anything wrong the tab's console or CSP
// recorder saw.
func (tb *tab) checkConsole() {
	t := tb.t
	t.Helper()
	if v, err := tb.cspViolations(); err != nil {
		if !t.Failed() {
			t.Errorf("%s: failed to read the CSP violations: %v", tb.name, err)
		}
	} else {
		for _, s := range v {
			t.Errorf("%s: CSP violation: %s", tb.name, s)
		}
	}
	problems, notes := tb.console.take()
	for _, n := range notes {
		t.Logf("%s: %s", tb.name, n)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", tb.name, p)
	}
}
