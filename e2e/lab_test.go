package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var labAlgorithms = []string{"log", "fixed", "counter", "gcra", "bucket"}

// labState is what the lab tests read from the page, by data-testid.
type labState struct {
	Status   string              `json:"status"`
	Progress string              `json:"progress"`
	Summary  string              `json:"summary"`
	Counts   map[string]string   `json:"counts"`
	Maxes    map[string]string   `json:"maxes"`
	Marks    map[string][]string `json:"marks"` // per lane: "<id>:<data-allowed>"
	ScrollW  int64               `json:"scrollW"`
	InnerW   int64               `json:"innerW"`
}

const labStateJS = `(() => {
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  const algs = ['log', 'fixed', 'counter', 'gcra', 'bucket'];
  const out = { counts: {}, maxes: {}, marks: {} };
  for (const a of algs) {
    out.counts[a] = q('lab-count-' + a) ? q('lab-count-' + a).textContent.trim() : null;
    out.maxes[a] = q('lab-max-' + a) ? q('lab-max-' + a).textContent.trim() : null;
    const lane = q('lab-lane-' + a);
    out.marks[a] = lane ? Array.from(lane.querySelectorAll('[data-testid="lab-mark"]'),
      (m) => m.getAttribute('data-id') + ':' + m.getAttribute('data-allowed')).sort() : [];
  }
  const st = document.getElementById('lab-status');
  out.status = st ? st.textContent.trim() : '';
  out.progress = (document.getElementById('lab-progress') || {}).textContent || '';
  out.summary = q('lab-summary') ? q('lab-summary').textContent.trim() : '';
  out.scrollW = document.documentElement.scrollWidth;
  out.innerW = window.innerWidth;
  return out;
})()`

// labLayoutJS lists what is laid out wrong on the lab page: text running
// past its card or its row's cell, a lane narrower than half the card, a
// page that scrolls sideways.
const labLayoutJS = `(() => {
  const out = [];
  const r = (el) => {
    const range = document.createRange();
    range.selectNodeContents(el);
    const a = el.getBoundingClientRect(), b = range.getBoundingClientRect();
    if (b.width === 0 && b.height === 0) return a;
    return { left: Math.min(a.left, b.left), right: Math.max(a.right, b.right) };
  };
  for (const el of document.querySelectorAll('.lab-name, .lab-stats, .lab-caption, .lab-summary, label, button, .chip')) {
    const card = el.closest('.card, .topbar');
    const b = card.getBoundingClientRect();
    if (r(el).right > b.right + 0.5 || r(el).left < b.left - 0.5) out.push((el.className || el.tagName) + ' "' + el.textContent.trim().slice(0, 40) + '" runs past its card');
  }
  for (const lane of document.querySelectorAll('.lab-lane')) {
    const card = lane.closest('.card').getBoundingClientRect();
    if (lane.getBoundingClientRect().width < card.width / 2) out.push(lane.dataset.testid + ' is only ' + Math.round(lane.getBoundingClientRect().width) + ' px wide');
  }
  if (document.documentElement.scrollWidth > window.innerWidth) out.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth);
  return out.slice(0, 20);
})()`

func (tb *tab) labState() labState {
	tb.t.Helper()
	return evaluate[labState](tb, labStateJS)
}

// waitLab polls the lab page until cond holds, for at most d.
func (tb *tab) waitLab(d time.Duration, what string, cond func(labState) bool) labState {
	tb.t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := tb.labState()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			j, _ := json.MarshalIndent(s, "", "  ")
			tb.t.Fatalf("%s: waited %s for %s; the page shows:\n%s", tb.name, d, what, j)
		}
		time.Sleep(pollEvery)
	}
}

func labURL(base, lab string, limit, windowS int, traffic string) string {
	return fmt.Sprintf("%s/lab?lab=%s&limit=%d&window=%d&traffic=%s", base, url.QueryEscape(lab), limit, windowS, traffic)
}

// openLab opens the lab in a tab and waits for its stream.
func (tb *tab) openLab(u string) {
	tb.t.Helper()
	tb.run("navigate to "+u, chromedp.Navigate(u))
	tb.waitLab(waitTimeout, "the lab's stream is live", func(s labState) bool { return s.Status == "live" })
}

// runLab clicks lab-run and waits until every request sent has a mark in
// every lane.
func (tb *tab) runLab(requests int, within time.Duration) labState {
	tb.t.Helper()
	tb.click("lab-run")
	return tb.waitLab(within, fmt.Sprintf("%d marks per lane and the run done", requests), func(s labState) bool {
		if !strings.HasPrefix(s.Progress, "done") {
			return false
		}
		for _, a := range labAlgorithms {
			if len(s.Marks[a]) != requests {
				return false
			}
		}
		return true
	})
}

// TestLabBoundary: limit 5, window 10 s, boundary traffic — five requests
// just before a fixed-window edge on the limiter's clock and five just after
// — lets ten through the fixed window within one window and five through the
// log, as the page's lab-max counts say. Screenshots at 1280 and 390 px
// (RATESCOPE_SCREENSHOT=1 writes them to docs/).
func TestLabBoundary(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	tb.openLab(labURL(e.app.URL, e.key, 5, 10, "boundary"))
	tb.run("choose boundary traffic", chromedp.SetValue(byTestID("lab-traffic"), "boundary"))
	// Up to three edges 10 s apart (a busy machine may miss one).
	s := tb.runLab(10, 45*time.Second)
	if !strings.HasPrefix(s.Progress, "done") || strings.Contains(s.Progress, "busy") {
		t.Fatalf("progress %q: the run missed its edge every time", s.Progress)
	}
	if s.Maxes["fixed"] != "10" || s.Maxes["log"] != "5" {
		t.Errorf("lab-max-fixed %q, lab-max-log %q; want 10 and 5", s.Maxes["fixed"], s.Maxes["log"])
	}
	if s.Counts["fixed"] != "10" || s.Counts["log"] != "5" {
		t.Errorf("lab-count-fixed %q, lab-count-log %q; want 10 and 5", s.Counts["fixed"], s.Counts["log"])
	}
	if !strings.Contains(s.Summary, "fixed window") {
		t.Errorf("the summary %q does not say what the fixed window did", s.Summary)
	}
	diffs := evaluate[int](tb, `document.querySelectorAll('[data-testid="lab-lane-fixed"] .lab-diff').length`)
	if diffs != 5 {
		t.Errorf("%d fixed marks highlighted as unlike the log, want 5", diffs)
	}
	if p := evaluate[[]string](tb, labLayoutJS); len(p) > 0 {
		t.Errorf("at 1280 px: %s", strings.Join(p, "\n"))
	}
	shot(t, tb, 1280, "lab-1280.png")

	tb.run("emulate a 390×844 viewport", chromedp.EmulateViewport(390, 844))
	s = tb.waitLab(waitTimeout, "a 390 px viewport", func(s labState) bool { return s.InnerW == 390 })
	if s.ScrollW > 390 {
		t.Errorf("at 390 px the lab scrolls sideways: scrollWidth %d", s.ScrollW)
	}
	if p := evaluate[[]string](tb, labLayoutJS); len(p) > 0 {
		t.Errorf("at 390 px: %s", strings.Join(p, "\n"))
	}
	shot(t, tb, 390, "lab-390.png")
}

// TestLabTwoTabs: a second tab on the same lab shows the same marks, each
// allowed or denied alike, in every lane — sent by the first tab.
func TestLabTwoTabs(t *testing.T) {
	e := start(t)
	one := openTab(t, browser(t), "tab 1")
	u := labURL(e.app.URL, e.key, 3, 5, "burst")
	one.openLab(u)
	two := openTab(t, one.ctx, "tab 2")
	two.openLab(u)
	a := one.runLab(6, waitTimeout)
	b := two.waitLab(waitTimeout, "the first tab's marks", func(s labState) bool {
		for _, alg := range labAlgorithms {
			if !slices.Equal(s.Marks[alg], a.Marks[alg]) {
				return false
			}
		}
		return true
	})
	for _, alg := range labAlgorithms {
		if b.Counts[alg] != a.Counts[alg] || b.Maxes[alg] != a.Maxes[alg] {
			t.Errorf("%s: tab 2 shows %s allowed, max %s; tab 1 %s, max %s", alg, b.Counts[alg], b.Maxes[alg], a.Counts[alg], a.Maxes[alg])
		}
	}
	if a.Counts["log"] != "3" {
		t.Errorf("a burst of 6 under 3 per 5 s: log allowed %s, want 3", a.Counts["log"])
	}
}

// TestLabNeedsTheToken: on a server with --api-token (and no --public-lab)
// the lab page says the lab needs the token and asks for it; a run without
// it, or with a wrong one, shows why it failed, and with the token it runs.
func TestLabNeedsTheToken(t *testing.T) {
	e := start(t, "--api-token", "lab-secret")
	tb := openTab(t, browser(t), "tab")
	tb.openLab(labURL(e.app.URL, e.key, 3, 5, "burst"))
	notice := evaluate[string](tb, `(document.querySelector('[data-testid="lab-locked"]') || {}).textContent || ''`)
	if !strings.Contains(notice, "API token") || !strings.Contains(notice, "--public-lab") {
		t.Fatalf("the lab page's notice %q does not say the lab needs the API token", notice)
	}
	labError := func(want string) {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for {
			got := evaluate[string](tb, `document.getElementById('lab-error').hidden ? '' : document.getElementById('lab-error').textContent`)
			if strings.Contains(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the lab's error reads %q, want it to say %q", got, want)
			}
			time.Sleep(pollEvery)
		}
	}
	tb.click("lab-run")
	labError("needs the API token")
	tb.run("type a wrong token", chromedp.SetValue(byTestID("lab-token"), "wrong"))
	tb.click("lab-run")
	labError("401")
	// The browser logs the 401 it was meant to get as an error; nothing else.
	problems, _ := tb.console.take()
	for _, p := range problems {
		if !strings.Contains(p, "status of 401 (Unauthorized)") {
			t.Errorf("%s: %s", tb.name, p)
		}
	}
	tb.run("type the token", chromedp.SetValue(byTestID("lab-token"), "lab-secret"))
	if s := tb.runLab(6, waitTimeout); s.Counts["log"] != "3" {
		t.Errorf("a burst of 6 under 3 per 5 s with the token: log allowed %s, want 3", s.Counts["log"])
	}
}

// TestModuleLabModel: the lab's counts, its max in any sliding window (an
// entry exactly one window older is out), disagreements with the log, the
// axis zoomed to the traffic, and one mark per request id.
func TestModuleLabModel(t *testing.T) {
	tb := moduleTab(t)
	runModuleCase(t, tb, `
  const { LabModel, maxInWindow, summary } = await import('/static/js/lab-model.js');
  await (await import('/static/js/algorithms.js')).loadAlgorithms(['log', 'fixed', 'counter', 'gcra', 'bucket']);
  eq('empty', maxInWindow([], 1000), 0);
  eq('one window', maxInWindow([0, 1, 2, 999], 1000), 4);
  eq('the cutoff is out', maxInWindow([0, 1000], 1000), 1);
  eq('a later busier window', maxInWindow([0, 500, 1400, 1450, 1499], 1000), 4);
  const algs = ['log', 'fixed', 'counter', 'gcra', 'bucket'];
  const m = new LabModel(algs);
  const msg = (id, nowMs, allowedBy) => ({ type: 'lab', lab: 'x', id: id, limit: 2, windowMs: 10000, nowMs: nowMs,
    results: algs.map((a) => ({ algorithm: a, allowed: allowedBy.includes(a), remaining: 0, retryAfterMs: 0 })) });
  eq('added', m.add(msg('a', 19900, algs)), true);
  eq('the same id again', m.add(msg('a', 19900, algs)), false);
  m.add(msg('c', 20100, ['fixed', 'counter', 'gcra', 'bucket']));
  m.add(msg('b', 19950, algs)); // arrives late: sorted by nowMs
  m.add(msg('d', 20150, ['fixed']));
  eq('order', m.requests.map((r) => r.id), ['a', 'b', 'c', 'd']);
  const s = m.stats();
  eq('log', [s.log.allowed, s.log.denied, s.log.max, s.log.differs], [2, 2, 2, 0]);
  eq('fixed', [s.fixed.allowed, s.fixed.max, s.fixed.differs], [4, 4, 2]);
  eq('gcra', [s.gcra.allowed, s.gcra.max, s.gcra.differs], [3, 3, 1]);
  eq('axis on the traffic, 15 % each side', m.axis(), { start: 19862, end: 20188, windowMs: 10000 });
  const text = summary(m, s, 'boundary');
  if (!text.includes('fixed window let up to 4') || !text.includes('never allowed more than 2')) out.push('summary: ' + text);
  m.clear();
  eq('cleared', [m.requests.length, m.axis()], [0, null]);
  // A reset forgets what was decided before it, not what the next run sent
  // while the reset message was on its way.
  m.add(msg('old', 19000, algs));
  m.add(msg('new', 21000, algs));
  m.resetAt(20000);
  eq('reset at a moment', m.requests.map((r) => r.id), ['new']);
  eq('a request forgotten by a reset can come back', m.add(msg('old', 19000, algs)), true);
  eq('one kept by it stays once', m.add(msg('new', 21000, algs)), false);
`)
}
