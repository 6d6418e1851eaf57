package e2e_test

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The explanation of a decision (testid explain): after a boundary test, the
// 429's row opens an explanation whose numbers are that answer's own —
// nowMs, oldestMs (the entry that must slide out), retryAfterMs and the sum
// that joins them — for a one-rule and a two-rule policy, a lock, a quota
// and a booked wait; Escape and the close button close it.

// captureJS makes the page keep every check answer it receives, so a test
// compares the explanation with the answer itself.
const captureJS = `(() => {
  if (window.__answers) return true;
  window.__answers = [];
  const f = window.fetch;
  window.fetch = async (...a) => {
    const r = await f(...a);
    if (String(a[0]).includes('/api/v1/check')) r.clone().json().then((j) => window.__answers.push(j), () => {});
    return r;
  };
  return true;
})()`

type answer struct {
	Allowed      bool   `json:"allowed"`
	NowMs        int64  `json:"nowMs"`
	OldestMs     *int64 `json:"oldestMs"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	BookedMs     int64  `json:"bookedMs"`
	Locked       bool   `json:"locked"`
	LockLevel    int    `json:"lockLevel"`
}

type explainView struct {
	Hidden  bool   `json:"hidden"`
	Outcome string `json:"outcome"`
	NowMs   string `json:"nowMs"`
	Retry   string `json:"retry"`
	Summary string `json:"summary"`
	Text    string `json:"text"`
	LockEnd string `json:"lockEnd"`
	Rules   []struct {
		Kth   string `json:"kth"`
		Retry string `json:"retry"`
		Fits  string `json:"fits"`
		Text  string `json:"text"`
		Sum   string `json:"sum"`
	} `json:"rules"`
	Steps   []string `json:"steps"`
	Focused string   `json:"focused"`
}

const explainJS = `(() => {
  const p = document.querySelector('[data-testid="explain"]');
  const t = (el) => (el ? el.textContent.replace(/\s+/g, ' ').trim() : '');
  const lock = p.querySelector('.explain-lock');
  return {
    hidden: p.hidden, outcome: p.dataset.outcome || '', nowMs: p.dataset.nowMs || '', retry: p.dataset.retryAfterMs || '',
    summary: t(p.querySelector('[data-testid="explain-summary"]')), text: t(p),
    lockEnd: lock ? lock.dataset.untilMs : '',
    rules: Array.from(p.querySelectorAll('[data-testid="explain-rule"]'), (r) => ({
      kth: r.dataset.kthMs || '', retry: r.dataset.retryMs || '', fits: r.dataset.fits || '',
      text: t(r), sum: t(r.querySelector('[data-testid="explain-sum"]')),
    })),
    steps: Array.from(p.querySelectorAll('[data-testid="explain-steps"] li'), (li) => li.dataset.step + (li.classList.contains('is-skipped') ? ':skipped' : '')),
    focused: document.activeElement ? (document.activeElement.dataset.testid || document.activeElement.tagName) : '',
  };
})()`

// explainPage opens the page on policy, runs the boundary test and returns
// the tab and the answers the page got.
func explainPage(t *testing.T, e *env, policy string) (*tab, []answer) {
	t.Helper()
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.app.URL + "/?key=" + url.QueryEscape(e.key) + "&policy=" + policy)
	evaluate[bool](tb, captureJS)
	tb.click("boundary-test")
	tb.waitFor("the boundary test's 429", func(s pageState) bool {
		return strings.HasPrefix(s.Boundary, "5 \u00d7 200, then 429") && len(s.Log) >= 6 && s.Log[0].Status == "429"
	})
	answers := evaluate[[]answer](tb, `window.__answers`)
	if len(answers) != 6 || answers[5].Allowed {
		t.Fatalf("the page's answers: %+v", answers)
	}
	return tb, answers
}

// openNewest opens the newest row's explanation, by keyboard (focus, Enter)
// or by a click, and waits until it shows that decision.
func openNewest(t *testing.T, tb *tab, keyboard bool, nowMs int64) explainView {
	t.Helper()
	row := chromedp.CSS(`[data-testid="log"] [data-testid="log-entry"]`)
	if keyboard {
		tb.run("focus the newest row and press Enter", chromedp.Focus(row), chromedp.KeyEvent(kb.Enter))
	} else {
		tb.run("click the newest row", chromedp.Click(row, chromedp.NodeVisible))
	}
	var v explainView
	deadline := time.Now().Add(waitTimeout)
	for {
		v = evaluate[explainView](tb, explainJS)
		if !v.Hidden && v.NowMs == fmt.Sprint(nowMs) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("the explanation of the decision at %d did not open: %+v", nowMs, v)
		}
		time.Sleep(pollEvery)
	}
}

// closeWith closes the explanation with Escape or its button.
func closeWith(t *testing.T, tb *tab, escape bool) {
	t.Helper()
	if escape {
		tb.run("press Escape", chromedp.KeyEvent(kb.Escape))
	} else {
		tb.click("explain-close")
	}
	if v := evaluate[explainView](tb, explainJS); !v.Hidden {
		t.Fatalf("the explanation stays open: %+v", v)
	}
}

// checkWindowRule: a rule without room names the answer's oldest entry, and
// its sum is the answer's: oldest + window − now = retry.
func checkWindowRule(t *testing.T, v explainView, i int, a answer, windowMs int64) {
	t.Helper()
	r := v.Rules[i]
	sum := fmt.Sprintf("retryAfterMs = kth + window − now = %d + %d − %d = %d", *a.OldestMs, windowMs, a.NowMs, *a.OldestMs+windowMs-a.NowMs)
	if r.Fits != "false" || r.Kth != fmt.Sprint(*a.OldestMs) || r.Sum != sum {
		t.Fatalf("rule %d: %+v, want kth %d and %q", i, r, *a.OldestMs, sum)
	}
	// The words, in seconds after the minute: the retry in ms and its sum.
	if !strings.Contains(r.Text, "the oldest, at ") || !strings.Contains(r.Text, fmt.Sprintf("→ retry in %s ms", fmtMs(*a.OldestMs+windowMs-a.NowMs))) {
		t.Fatalf("rule %d reads %q", i, r.Text)
	}
}

func fmtMs(ms int64) string {
	s := fmt.Sprint(ms)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestExplainOneRule: the 429 of a boundary test on demo (5/10s), opened by
// keyboard, closed by Escape; an allowed row by a click.
func TestExplainOneRule(t *testing.T) {
	e := start(t)
	tb, answers := explainPage(t, e, "demo")
	a := answers[5]
	v := openNewest(t, tb, true, a.NowMs)
	if v.Outcome != "denied" || v.Retry != fmt.Sprint(a.RetryAfterMs) || len(v.Rules) != 1 || a.OldestMs == nil {
		t.Fatalf("the 429's explanation %+v, answer %+v", v, a)
	}
	checkWindowRule(t, v, 0, a, 10000)
	if !strings.HasPrefix(v.Summary, "denied at ") || !strings.Contains(v.Summary, fmt.Sprintf("retry in %s ms", fmtMs(a.RetryAfterMs))) {
		t.Fatalf("summary %q", v.Summary)
	}
	if len(v.Steps) < 5 || v.Steps[0] != "now" || !strings.Contains(strings.Join(v.Steps, " "), "record:skipped") || !strings.Contains(v.Text, fmt.Sprintf("now = %d", a.NowMs)) {
		t.Fatalf("steps %v in %q", v.Steps, v.Text)
	}
	if v.Focused != "explain" {
		t.Fatalf("focus on %q, want the explanation", v.Focused)
	}
	closeWith(t, tb, true)
	// An allowed one: the 5th, whose window held 4.
	tb.run("click the 5th decision", chromedp.Click(chromedp.CSS(`[data-testid="log"] [data-testid="log-entry"]:nth-child(2)`), chromedp.NodeVisible))
	v = evaluate[explainView](tb, explainJS)
	if v.Hidden || v.Outcome != "allowed" || v.NowMs != fmt.Sprint(answers[4].NowMs) || v.Rules[0].Fits != "true" || !strings.Contains(v.Rules[0].Text, "held 4 of 5") {
		t.Fatalf("the 5th check's explanation: %+v", v)
	}
	closeWith(t, tb, false)
}

// TestExplainTwoRules: on demo=5/10s,5/1m both rules are full at the 429;
// each names the same oldest entry, and the minute's sum is the answer's.
func TestExplainTwoRules(t *testing.T) {
	e := start(t, "--policy", "demo=5/10s,5/1m")
	tb, answers := explainPage(t, e, "demo")
	a := answers[5]
	v := openNewest(t, tb, false, a.NowMs)
	if v.Outcome != "denied" || v.Retry != fmt.Sprint(a.RetryAfterMs) || len(v.Rules) != 2 || a.OldestMs == nil || *a.OldestMs+60000-a.NowMs != a.RetryAfterMs {
		t.Fatalf("the 429's explanation %+v, answer %+v", v, a)
	}
	checkWindowRule(t, v, 0, a, 10000)
	checkWindowRule(t, v, 1, a, 60000)
	closeWith(t, tb, true)
}

// TestExplainLock: on demo=5/10s+lock=1m the 429 locks the key: the
// explanation says until when, which is the answer's now + retry.
func TestExplainLock(t *testing.T) {
	e := start(t, "--policy", "demo=5/10s+lock=1m")
	tb, answers := explainPage(t, e, "demo")
	a := answers[5]
	v := openNewest(t, tb, false, a.NowMs)
	if !a.Locked || v.Outcome != "locked" || v.LockEnd != fmt.Sprint(a.NowMs+a.RetryAfterMs) || !strings.HasPrefix(v.Summary, "locked: ") {
		t.Fatalf("the lock's explanation %+v, answer %+v", v, a)
	}
	if !strings.Contains(v.Summary, fmt.Sprintf("level %d", a.LockLevel)) || strings.Contains(strings.Join(v.Steps, " "), "lock:skipped") {
		t.Fatalf("summary %q steps %v", v.Summary, v.Steps)
	}
	closeWith(t, tb, true)
}

// TestExplainQuota: on demo=5/day the 429 is the day's quota: no room until
// the next day, the answer's retry.
func TestExplainQuota(t *testing.T) {
	e := start(t, "--policy", "demo=5/day")
	tb, answers := explainPage(t, e, "demo")
	a := answers[5]
	v := openNewest(t, tb, false, a.NowMs)
	if v.Outcome != "denied" || len(v.Rules) != 1 || v.Rules[0].Retry != fmt.Sprint(a.RetryAfterMs) ||
		!strings.Contains(v.Rules[0].Text, "no room until the next day starts: retry in "+fmtMs(a.RetryAfterMs)+" ms") {
		t.Fatalf("the quota's explanation %+v, answer %+v", v, a)
	}
	closeWith(t, tb, true)
}

// TestExplainBookedWait: after the boundary test on demo=5/3s, a check that
// may wait 10 s books the moment the oldest entry slides out; its row
// explains the booking with the answer's now and slot.
func TestExplainBookedWait(t *testing.T) {
	e := start(t, "--policy", "demo=5/3s")
	tb, _ := explainPage(t, e, "demo")
	tb.run("wait up to 10 s", chromedp.SetValue(byTestID("wait"), "10s"))
	tb.click("send")
	var answers []answer
	deadline := time.Now().Add(waitTimeout)
	for len(answers) < 7 {
		if time.Now().After(deadline) {
			t.Fatalf("no answer to the waiting check: %+v", answers)
		}
		time.Sleep(pollEvery)
		answers = evaluate[[]answer](tb, `window.__answers`)
	}
	a := answers[6]
	if a.BookedMs == 0 {
		t.Fatalf("the waiting check did not book: %+v", a)
	}
	v := openNewest(t, tb, false, a.NowMs)
	if v.Outcome != "booked" || !strings.HasPrefix(v.Summary, "booked: ") || !strings.Contains(v.Summary, fmt.Sprintf("held %s ms", fmtMs(a.BookedMs-a.NowMs))) {
		t.Fatalf("the booking's explanation %+v, answer %+v", v, a)
	}
	if steps := strings.Join(v.Steps, " "); strings.Contains(steps, "booking:skipped") || strings.Contains(steps, "record:skipped") {
		t.Fatalf("steps %v", v.Steps)
	}
	closeWith(t, tb, false)
}

// TestLabExplainsBoundary: after a boundary run (limit 5, window 10 s) the
// lab says in one sentence per algorithm what it let through, with the
// run's numbers: the fixed window 5 before the edge and 5 after, twice the
// limit; the log 5, never more than the limit in any window.
func TestLabExplainsBoundary(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	tb.openLab(labURL(e.app.URL, e.key, 5, 10, "boundary"))
	tb.run("choose boundary traffic", chromedp.SetValue(byTestID("lab-traffic"), "boundary"))
	s := tb.runLab(10, 45*time.Second)
	if !strings.HasPrefix(s.Progress, "done") || strings.Contains(s.Progress, "busy") {
		t.Fatalf("progress %q: the run missed its edge every time", s.Progress)
	}
	got := evaluate[map[string]string](tb, `Object.fromEntries(Array.from(document.querySelectorAll('[data-testid="lab-explain"] li'), (li) => [li.dataset.algorithm, li.textContent]))`)
	if len(got) != len(labAlgorithms) {
		t.Fatalf("sentences %v, want one per algorithm", got)
	}
	edge := regexp.MustCompile(`edge at \d\d:\d\d:\d0\.000 UTC`)
	fixed := regexp.MustCompile(`^fixed window: 10 allowed — 5 just before the edge at \d\d:\d\d:\d0\.000 UTC, 5 just after: twice the limit \(10 of 5\) in \d+\.\d{3} s\.$`)
	if !fixed.MatchString(got["fixed"]) {
		t.Errorf("fixed: %q", got["fixed"])
	}
	if !strings.Contains(got["log"], ": 5 allowed — 5 just before the edge") || !strings.HasSuffix(got["log"], "0 just after: never more than 5 of 5 in any 10 s window.") || !edge.MatchString(got["log"]) {
		t.Errorf("log: %q", got["log"])
	}
}
