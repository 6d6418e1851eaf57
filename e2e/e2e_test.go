// Package e2e_test drives the visualizer in headless Chromium against the
// whole server (in-process, via apptest) on a Redis (redistest: a real
// redis-server when installed, else the embedded one):
// the clock, the boundary test, two tabs on one window, entries sliding out,
// Redis going down and coming back, screenshots at two widths, and a console
// free of exceptions and CSP violations.
//
// Run with `go test -count=1 ./e2e/`. RATESCOPE_SCREENSHOT=1 also writes
// the README's pictures: docs/screenshot.png (after a boundary test, 1280 px
// wide) and docs/busy-1280.png, docs/busy-390.png (a busy window).
package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// env is one test's world: its own Redis, the server on it, and a client key
// nobody else uses.
type env struct {
	rs  *redistest.Server // nil unless started by startReal
	rdb *redis.Client
	app *apptest.App
	key string
}

// start starts a Redis (a redis-server when installed, else the embedded one)
// and the server on it with extra args (e.g. "--policy", "demo=5/3s").
func start(t *testing.T, args ...string) *env {
	t.Helper()
	browser(t) // skip (or fail under strict) before starting anything when chromium is missing
	return startOn(t, redistest.URL(t), args...)
}

// startReal is start on a redis-server the test can stop and restart.
func startReal(t *testing.T, args ...string) *env {
	t.Helper()
	browser(t)
	rs := redistest.Start(t)
	e := startOn(t, rs.URL, args...)
	e.rs = rs
	return e
}

func startOn(t *testing.T, redisURL string, args ...string) *env {
	t.Helper()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{rdb: redis.NewClient(opt), key: uniqueKey(t)}
	t.Cleanup(func() { _ = e.rdb.Close() })
	// These tests are about the page, not Redis latency: a generous check
	// timeout keeps a loaded machine from turning a check into a 503.
	e.app = apptest.Start(t, map[string]string{"REDIS_URL": redisURL, "RATESCOPE_CHECK_TIMEOUT": "3s"}, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", e.app.Logs())
		}
	})
	return e
}

func (e *env) pageURL() string {
	return e.app.URL + "/?key=" + url.QueryEscape(e.key) + "&policy=demo"
}

func (e *env) zsetKey() string { return "rate_limit:{" + e.key + "}:demo" }

// members reads the window's ZSET straight from Redis, with scores.
func (e *env) members(t *testing.T) []redis.Z {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	zs, err := e.rdb.ZRangeWithScores(ctx, e.zsetKey(), 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", e.zsetKey(), err)
	}
	return zs
}

func memberIDs(zs []redis.Z) []string {
	ids := make([]string, 0, len(zs))
	for _, z := range zs {
		ids = append(ids, fmt.Sprint(z.Member))
	}
	return ids
}

// windowNowMs asks the server for the window without consuming: its nowMs is
// Redis's clock.
func (e *env) windowNowMs(t *testing.T) int64 {
	t.Helper()
	resp, err := http.Get(e.app.URL + "/api/v1/window?key=" + url.QueryEscape(e.key) + "&policy=demo")
	if err != nil {
		t.Fatalf("GET /api/v1/window: %v", err)
	}
	defer resp.Body.Close()
	var w struct {
		NowMs int64 `json:"nowMs"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/window: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		t.Fatalf("GET /api/v1/window: %v", err)
	}
	return w.NowMs
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}

// samePlaces reports whether each timeline entry's data-ms is its member's
// score in Redis.
func samePlaces(s pageState, zs []redis.Z) bool {
	score := map[string]int64{}
	for _, z := range zs {
		score[fmt.Sprint(z.Member)] = int64(z.Score)
	}
	if len(s.EntryMs) != len(s.IDs) {
		return false
	}
	for i, id := range s.IDs {
		if ms, ok := score[id]; !ok || ms != s.EntryMs[i] {
			return false
		}
	}
	return true
}

var clockRE = regexp.MustCompile(`^[0-9]{13}$`)

func clockMs(s string) (int64, bool) {
	if !clockRE.MatchString(s) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// boundaryText is what boundary-result must read for a policy of limit 5:
// the exact wait counting down (or over), and the Retry-After header
// labelled as the whole seconds it is.
func boundaryText(windowSeconds int) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`^5 \x{00d7} 200, then 429: (retry in [0-9]+\.[0-9] s|room again) · Retry-After: %d \(whole seconds, rounded up\)$`, windowSeconds))
}

// checkBoundaryLog checks the log after a boundary test on a fresh window:
// the six decisions, newest first, so the 429 (with its retryAfterMs) on top.
func checkBoundaryLog(log []logEntry) error {
	var ok, denied int
	for _, l := range log {
		switch l.Status {
		case "200":
			ok++
		case "429":
			denied++
		}
	}
	switch {
	case ok != 5 || denied != 1:
		return fmt.Errorf("log has %d × 200 and %d × 429 among %d log-entry items, want 5 and 1", ok, denied, len(log))
	case log[0].Status != "429":
		return fmt.Errorf("the newest log-entry is %q, want the 429", log[0].Text)
	case !strings.Contains(log[0].Text, "retryAfterMs"):
		return fmt.Errorf("the 429 log-entry %q does not show its retryAfterMs", log[0].Text)
	}
	return nil
}

// boundary clicks boundary-test on a fresh demo window (limit 5, windowSeconds
// long) and checks what the page shows against Redis itself.
func (e *env) boundary(t *testing.T, tb *tab, windowSeconds int) pageState {
	t.Helper()
	want := boundaryText(windowSeconds)
	tb.click("boundary-test")
	tb.waitFor(fmt.Sprintf("boundary-result %s", want), func(s pageState) bool { return want.MatchString(s.Boundary) })
	zs := e.members(t)
	ids := memberIDs(zs)
	if len(ids) != 5 {
		t.Fatalf("after the boundary test %s holds %d members, want 5: %v", e.zsetKey(), len(ids), ids)
	}
	return tb.waitCheck(waitTimeout, "the boundary test's window on the page", func(s pageState) error {
		switch {
		case !sameSet(s.IDs, ids):
			return fmt.Errorf("timeline-entry data-ids %v, want the ZSET members %v", s.IDs, ids)
		case !samePlaces(s, zs):
			return fmt.Errorf("timeline-entry data-ms %v for %v, want the ZSET scores %v", s.EntryMs, s.IDs, zs)
		case s.Count != "5 / 5":
			return fmt.Errorf("count reads %q, want %q", s.Count, "5 / 5")
		case s.RingMs == nil || *s.RingMs <= 0:
			return fmt.Errorf("ring data-remaining-ms is %v, want > 0", s.RingMs)
		}
		return checkBoundaryLog(s.Log)
	})
}

// TestClock: the clock is the limiter's (Redis's) epoch-ms clock, advances,
// and is interpolated between ticks (here one a second).
func TestClock(t *testing.T) {
	e := start(t, "--tick-interval", "1s")
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())

	s := tb.waitFor("a 13-digit clock", func(s pageState) bool { return clockRE.MatchString(s.Clock) })
	first, _ := clockMs(s.Clock)
	tb.waitFor("the clock to advance by a second", func(s pageState) bool {
		c, ok := clockMs(s.Clock)
		return ok && c >= first+1000
	})

	// Close to Redis TIME: bracket the server's nowMs (and Redis's own TIME)
	// between two readings of the page's clock.
	const slack = 2000
	before, _ := clockMs(tb.state().Clock)
	serverNow := e.windowNowMs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	redisNow, err := e.rdb.Time(ctx).Result()
	cancel()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	after, _ := clockMs(tb.state().Clock)
	for name, ms := range map[string]int64{"/api/v1/window nowMs": serverNow, "Redis TIME": redisNow.UnixMilli()} {
		if ms < before-slack || ms > after+slack {
			t.Errorf("the page's clock read %d then %d, but %s was %d: more than %d ms apart", before, after, name, ms, slack)
		}
	}

	// Interpolated: sampled every 40 ms for 1.5 s, a clock that only moved
	// on the 1 s ticks would show two or three values.
	samples := evaluate[[]string](tb, `new Promise((resolve) => {
  const el = document.querySelector('[data-testid="clock"]');
  const out = [];
  const t0 = performance.now();
  const id = setInterval(() => {
    out.push(el.textContent.trim());
    if (performance.now() - t0 >= 1500) { clearInterval(id); resolve(out); }
  }, 40);
})`, chromedp.EvalAwaitPromise)
	distinct := map[int64]bool{}
	var prev int64
	for i, v := range samples {
		c, ok := clockMs(v)
		if !ok {
			t.Fatalf("clock sample %d reads %q, want 13 digits", i, v)
		}
		if c < prev {
			t.Errorf("the clock ran backwards: %d after %d", c, prev)
		}
		prev = c
		distinct[c] = true
	}
	if len(distinct) < 6 {
		t.Errorf("the clock showed %d distinct values in %d samples over 1.5 s with 1 s ticks: not interpolated between ticks: %v", len(distinct), len(samples), samples)
	}
}

// TestBoundaryTest: the button's six real calls, and the page's window matches
// the ZSET in Redis member for member.
func TestBoundaryTest(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	s := tb.waitFor("count to read 0 / 5 on a fresh window", func(s pageState) bool { return s.Count == "0 / 5" })
	if len(s.IDs) != 0 || len(s.Log) != 0 {
		t.Fatalf("a fresh window shows %d timeline entries and %d log entries", len(s.IDs), len(s.Log))
	}
	e.boundary(t, tb, 10)
}

// TestTwoTabs: a second tab on the same window shows the same entries, both
// count two viewers, a request sent from one tab appears in the other, and
// the count drops back when a tab closes.
func TestTwoTabs(t *testing.T) {
	// A long window, so nothing slides out while a slow machine catches up.
	e := start(t, "--policy", "demo=5/60s")
	tab1 := openTab(t, browser(t), "tab 1")
	tab1.navigate(e.pageURL())
	for n := 1; n <= 2; n++ {
		tab1.click("send")
		tab1.waitFor(fmt.Sprintf("%d timeline entries", n), func(s pageState) bool { return len(s.IDs) == n })
	}
	ids := memberIDs(e.members(t))
	if len(ids) != 2 {
		t.Fatalf("after two sends the ZSET holds %v, want 2 members", ids)
	}

	tab2 := openTab(t, tab1.ctx, "tab 2")
	tab2.navigate(e.pageURL())
	for _, tb := range []*tab{tab2, tab1} {
		tb.waitCheck(waitTimeout, "the shared window", func(s pageState) error {
			switch {
			case s.Viewers != "2":
				return fmt.Errorf("viewers reads %q, want 2", s.Viewers)
			case !sameSet(s.IDs, ids):
				return fmt.Errorf("timeline-entry data-ids %v, want the ZSET members %v", s.IDs, ids)
			case s.Count != "2 / 5":
				return fmt.Errorf("count reads %q, want 2 / 5", s.Count)
			}
			return nil
		})
	}

	tab1.click("send")
	deadline := time.Now().Add(waitTimeout)
	for len(ids) != 3 && time.Now().Before(deadline) {
		time.Sleep(pollEvery)
		ids = memberIDs(e.members(t))
	}
	if len(ids) != 3 {
		t.Fatalf("after the third send the ZSET holds %v, want 3 members", ids)
	}
	tab2.waitCheck(waitTimeout, "tab 1's request in tab 2", func(s pageState) error {
		switch {
		case !sameSet(s.IDs, ids):
			return fmt.Errorf("timeline-entry data-ids %v, want the ZSET members %v", s.IDs, ids)
		case s.Count != "3 / 5":
			return fmt.Errorf("count reads %q, want 3 / 5", s.Count)
		case len(s.Log) == 0 || s.Log[0].Status != "200":
			return fmt.Errorf("tab 2's log %v has no 200 on top", s.Log)
		}
		return nil
	})

	tab2.close()
	tab1.waitFor("viewers to read 1 after tab 2 closed", func(s pageState) bool { return s.Viewers == "1" })
}

// TestSlideOut: with a 3 s window, the boundary test's entries slide out of
// the timeline, the count returns to 0 / 5 and the ring to 0 within the
// window plus a few seconds, and no sooner than the window allows.
func TestSlideOut(t *testing.T) {
	const windowMs = 3000
	e := start(t, "--policy", "demo=5/3s")
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())

	want := boundaryText(windowMs / 1000)
	maxSeen := 0
	tb.click("boundary-test")
	tb.waitFor(fmt.Sprintf("boundary-result %s", want), func(s pageState) bool {
		maxSeen = max(maxSeen, len(s.IDs))
		return want.MatchString(s.Boundary)
	})
	zs := e.members(t)
	if len(zs) != 5 {
		t.Fatalf("after the boundary test %s holds %d members, want 5", e.zsetKey(), len(zs))
	}
	newest := int64(zs[len(zs)-1].Score)

	// Until the newest entry's score + window, plus a few seconds.
	s := tb.waitCheck(windowMs*time.Millisecond+6*time.Second, "the entries to slide out", func(s pageState) error {
		maxSeen = max(maxSeen, len(s.IDs))
		switch {
		case len(s.IDs) != 0:
			return fmt.Errorf("%d timeline entries left", len(s.IDs))
		case s.Count != "0 / 5":
			return fmt.Errorf("count reads %q, want 0 / 5", s.Count)
		case s.RingMs == nil || *s.RingMs != 0:
			return fmt.Errorf("ring data-remaining-ms is %v, want 0", s.RingMs)
		}
		return nil
	})
	if maxSeen != 5 {
		t.Errorf("the timeline never showed the 5 entries (at most %d)", maxSeen)
	}
	// The page's clock is Redis's; nothing may leave before score + window.
	if c, ok := clockMs(s.Clock); !ok || c < newest+windowMs-250 {
		t.Errorf("the timeline was empty at clock %q, before the newest entry (score %d) left the %d ms window", s.Clock, newest, windowMs)
	}
}

// TestRedisDown: status follows Redis: live, redis down while it is stopped,
// live again after a restart, and the stream carries decisions again.
func TestRedisDown(t *testing.T) {
	e := startReal(t) // stops and restarts redis-server: skipped without one
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())

	// Every change of status, as the page makes it, so a blip between two
	// polls is seen too.
	evaluate[bool](tb, `(() => {
  const el = document.querySelector('[data-testid="status"]');
  const t0 = performance.now();
  window.__e2eStatus = [];
  new MutationObserver(() => window.__e2eStatus.push(Math.round(performance.now() - t0) + 'ms ' + el.textContent.trim()))
    .observe(el, { childList: true, characterData: true, subtree: true });
  return true;
})()`)

	e.rs.Stop()
	stopped := time.Now()
	tb.waitFor("status redis down", func(s pageState) bool { return s.Status == "redis down" })
	// Stay down past the page's 5 s watchdog: whatever the page does when the
	// stream goes quiet, it must never claim to be live while Redis is down.
	tb.waitCheck(waitTimeout, "7 s of Redis down", func(s pageState) error {
		if s.Status == "live" {
			t.Fatalf("status reads live %s after Redis stopped", time.Since(stopped).Round(time.Millisecond))
		}
		if time.Since(stopped) < 7*time.Second {
			return errors.New("not yet")
		}
		return nil
	})
	seen := evaluate[[]string](tb, `window.__e2eStatus`)
	t.Logf("status while Redis was down: %v", seen)
	for _, s := range seen {
		// The server keeps repeating "down", so the stream never goes quiet
		// and the page never drops it to reconnect.
		if strings.HasSuffix(s, " live") || strings.HasSuffix(s, " reconnecting") {
			t.Errorf("status read %q while Redis was down: %v", s, seen)
			break
		}
	}
	e.rs.Restart()
	tb.waitFor("status live after the restart", func(s pageState) bool { return s.Status == "live" })

	tb.click("send")
	var ids []string
	deadline := time.Now().Add(waitTimeout)
	for len(ids) == 0 && time.Now().Before(deadline) {
		time.Sleep(pollEvery)
		ids = memberIDs(e.members(t))
	}
	if len(ids) != 1 {
		t.Fatalf("after a send on the restarted Redis the ZSET holds %v, want 1 member", ids)
	}
	tb.waitCheck(waitTimeout, "the new entry on the page", func(s pageState) error {
		switch {
		case !sameSet(s.IDs, ids):
			return fmt.Errorf("timeline-entry data-ids %v, want the ZSET members %v", s.IDs, ids)
		case s.Count != "1 / 5":
			return fmt.Errorf("count reads %q, want 1 / 5", s.Count)
		}
		return nil
	})
}

// TestScreenshots: the page after a boundary test at 1280×800, and at 390 px
// wide without horizontal scrolling. RATESCOPE_SCREENSHOT=1 writes both to
// docs/.
func TestScreenshots(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	tb.navigate(e.pageURL())
	e.boundary(t, tb, 10)
	if os.Getenv("RATESCOPE_SCREENSHOT") == "1" {
		time.Sleep(time.Second) // the new rows and the ring settle: the picture is for people
	}
	shot(t, tb, 1280, "screenshot.png")

	tb.run("emulate a 390×844 viewport", chromedp.EmulateViewport(390, 844))
	s := tb.waitFor("a 390 px viewport", func(s pageState) bool { return s.InnerW == 390 })
	if s.ScrollW > 390 {
		wide := evaluate[[]string](tb, `Array.from(document.querySelectorAll('body *'))
  .filter((el) => el.getBoundingClientRect().right > document.documentElement.clientWidth + 0.5)
  .slice(0, 10)
  .map((el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className && el.className.baseVal === undefined ? '.' + String(el.className).trim().split(/\s+/).join('.') : '') + ' right=' + Math.round(el.getBoundingClientRect().right))`)
		t.Errorf("at 390 px the page scrolls sideways: scrollWidth %d; too wide: %v", s.ScrollW, wide)
	}
	shot(t, tb, 390, "") // checked, not kept
}

// shot takes a screenshot of the whole page, checks it is a PNG of the
// viewport's width, and writes it to docs/name when RATESCOPE_SCREENSHOT=1.
func shot(t *testing.T, tb *tab, width int, name string) {
	t.Helper()
	shotOf(t, tb, chromedp.FullScreenshot(100), width, name)
}

// shotOf is shot with the screenshot action of the caller's choice.
func shotOf(t *testing.T, tb *tab, take chromedp.Action[[]byte], width int, name string) {
	t.Helper()
	var img []byte
	tb.do("screenshot", func(ctx context.Context) error {
		var err error
		img, err = chromedp.Run(ctx, take)
		return err
	})
	cfg, err := png.DecodeConfig(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if cfg.Width != width {
		t.Errorf("the screenshot is %d×%d, want %d px wide", cfg.Width, cfg.Height, width)
	}
	if name == "" || os.Getenv("RATESCOPE_SCREENSHOT") != "1" {
		return
	}
	path := filepath.Join("..", "docs", name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d×%d)", path, cfg.Width, cfg.Height)
}

// TestConsoleWatch shows that the console checks every other test relies on
// can fail: a blocked inline script and an uncaught exception are both seen.
func TestConsoleWatch(t *testing.T) {
	browser(t)
	app := apptest.Start(t, nil) // the embedded Redis is enough here
	tb := openTab(t, browser(t), "tab")
	tb.navigate(app.URL + "/?key=" + uniqueKey(t) + "&policy=demo")

	ran := evaluate[bool](tb, `(() => {
  window.__e2eInline = false;
  const s = document.createElement('script');
  s.textContent = 'window.__e2eInline = true';
  document.head.append(s);
  setTimeout(() => { throw new Error('e2e deliberate exception'); }, 0);
  return window.__e2eInline;
})()`)
	if ran {
		t.Errorf("an inline script ran: the page's Content-Security-Policy does not block it")
	}

	var problems, notes []string
	deadline := time.Now().Add(waitTimeout)
	for {
		p, n := tb.console.take()
		problems, notes = append(problems, p...), append(notes, n...)
		all := strings.Join(problems, "\n")
		if strings.Contains(all, "CSP") && strings.Contains(all, "e2e deliberate exception") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console watch missed the CSP violation or the exception; problems:\n%s\nnotes:\n%s", all, strings.Join(notes, "\n"))
		}
		time.Sleep(pollEvery)
	}
	v, err := tb.cspViolations()
	if err != nil {
		t.Fatal(err)
	}
	if len(v) == 0 {
		t.Errorf("the page's securitypolicyviolation recorder saw nothing")
	}
	t.Logf("seen, as expected: %q, %q", problems, v)
}

// TestRace presses both race buttons and reads the outcome from race-result:
// naive lets more than the limit through, atomic exactly the limit, and the
// timeline then holds the atomic run's entries, equal to the ZSET members.
func TestRace(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	tb.waitFor("status live", func(s pageState) bool { return s.Status == "live" })
	raceText := func() string {
		return evaluate[string](tb, `document.querySelector('[data-testid="race-result"]').textContent.replace(/\s+/g, ' ').trim()`)
	}
	waitText := func(what string, re *regexp.Regexp) string {
		deadline := time.Now().Add(waitTimeout)
		for {
			if s := raceText(); re.MatchString(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: race-result reads %q", what, raceText())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	tb.click("race-naive")
	got := waitText("naive", regexp.MustCompile(`naive: (\d+) of 200 allowed, limit 5 — overshoot (\d+)`))
	m := regexp.MustCompile(`naive: (\d+) of 200 allowed, limit 5 — overshoot (\d+)`).FindStringSubmatch(got)
	if n, _ := strconv.Atoi(m[1]); n <= 5 {
		t.Fatalf("naive allowed %d: no overshoot (%q)", n, got)
	}
	tb.click("race-atomic")
	got = waitText("atomic", regexp.MustCompile(`atomic: 5 of 200 allowed, limit 5 — exact`))
	t.Logf("race-result: %q", got)
	tb.waitFor("timeline = ZSET after the atomic race", func(s pageState) bool {
		zs := e.members(t)
		return len(zs) == 5 && sameSet(s.IDs, memberIDs(zs))
	})
}
