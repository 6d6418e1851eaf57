package e2e_test

// The page for learners: what a newcomer needs to read the window without
// knowing what happened before the tab opened — the entries already in it
// listed in the log, a clock people can read, every entry of a burst
// visible, a lab that survives a reload, and hints where a number or a list
// says less than it seems.

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// waitEval evaluates js in the page until ok accepts its value, for at most
// waitTimeout, and fails the test with the last value when it does not.
func waitEval[T any](tb *tab, what, js string, ok func(T) bool) T {
	tb.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		v := evaluate[T](tb, js)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("%s: waited %s for %s; the page shows %+v", tb.name, waitTimeout, what, v)
		}
		time.Sleep(pollEvery)
	}
}

// earlierRow is a log row as the learner tests read it.
type earlierRow struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Earlier bool   `json:"earlier"`
	Text    string `json:"text"`
}

type logView struct {
	Rows      []earlierRow `json:"rows"`
	Count     string       `json:"count"`
	EmptyText string       `json:"emptyText"` // what the log's ::before says: "none" unless it reads "No decisions yet"
	Notes     []string     `json:"notes"`
}

const logViewJS = `(() => {
  const log = document.querySelector('[data-testid="log"]');
  const rows = Array.from(log.querySelectorAll('[data-testid="log-entry"]'), (e) => ({
    id: e.getAttribute('data-id') || '',
    status: (e.querySelector('.badge') || {}).textContent || '',
    earlier: e.getAttribute('data-earlier') === 'true',
    text: e.textContent.replace(/\s+/g, ' ').trim(),
  }));
  return {
    rows: rows,
    count: document.querySelector('[data-testid="count"]').textContent.trim(),
    emptyText: getComputedStyle(log, '::before').content,
    notes: Array.from(log.querySelectorAll('.log-note'), (e) => e.textContent.replace(/\s+/g, ' ').trim()),
  };
})()`

// TestLogListsTheWindowOnLoad: a tab opened on a full window lists the five
// entries already in it, marked as recorded before the tab opened, instead
// of "No decisions yet" beside 5 / 5.
func TestLogListsTheWindowOnLoad(t *testing.T) {
	e := start(t, "--policy", "demo=5/60s") // nothing slides out while the test runs
	for i := range 5 {
		if code, body := check(t, e.app.URL, "demo", e.key); code != 200 {
			t.Fatalf("check %d: %d %v", i+1, code, body)
		}
	}
	ids := memberIDs(e.members(t))
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	v := waitEval(tb, fmt.Sprintf("the log to list the window's entries %v as recorded before the tab opened", ids), logViewJS, func(v logView) bool {
		var got []string
		earlier := true
		for _, r := range v.Rows {
			got = append(got, r.ID)
			earlier = earlier && r.Earlier && r.Status == "200"
		}
		return v.Count == "5 / 5" && earlier && sameSet(got, ids) && v.EmptyText == "none" && len(v.Notes) == 1
	})
	if !strings.Contains(v.Notes[0], "5 entries in the window when this tab opened") {
		t.Errorf("the note reads %q", v.Notes[0])
	}
	for _, r := range v.Rows {
		if !strings.Contains(r.Text, "before this tab") {
			t.Errorf("row %q does not say it was recorded before this tab opened", r.Text)
		}
	}

	// A decision seen live goes on top, unmarked.
	tb.click("send")
	tb.waitFor("the 429 on top of the earlier rows", func(s pageState) bool {
		return len(s.Log) == 6 && s.Log[0].Status == "429"
	})
}

// TestClockShowsUTC: beside the epoch milliseconds, the clock reads the same
// instant as HH:MM:SS.mmm in UTC.
func TestClockShowsUTC(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	utcRE := regexp.MustCompile(`^[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}$`)
	// One evaluation reads both: the page writes them in the same frame.
	c := waitEval(tb, "a 13-digit clock beside HH:MM:SS.mmm", `[document.querySelector('[data-testid="clock"]').textContent.trim(),
  (document.querySelector('[data-testid="clock-utc"]') || {textContent: ''}).textContent.trim()]`, func(c [2]string) bool {
		return clockRE.MatchString(c[0]) && utcRE.MatchString(c[1])
	})
	ms, _ := clockMs(c[0])
	if want := time.UnixMilli(ms).UTC().Format("15:04:05.000"); c[1] != want {
		t.Errorf("clock %s reads %q in UTC, want %q", c[0], c[1], want)
	}
	label := evaluate[string](tb, `document.querySelector('.readout-clock').textContent.replace(/\s+/g, ' ')`)
	if !strings.Contains(label, "UTC") {
		t.Errorf("the clock's readout %q does not say the time is UTC", label)
	}
}

// hintView is the log's scroll hint beside what the list really shows.
type hintView struct {
	Shown  bool   `json:"shown"`
	Text   string `json:"text"`
	Rows   int    `json:"rows"`   // rows in the list
	Hidden int    `json:"hidden"` // rows that end below the list's visible part
}

const hintJS = `(() => {
  const log = document.querySelector('[data-testid="log"]');
  const hint = document.querySelector('[data-testid="log-more"]');
  const box = log.getBoundingClientRect();
  const rows = Array.from(log.children);
  const hidden = rows.filter((li) => li.getBoundingClientRect().bottom > box.bottom + 1).length;
  const shown = !!hint && !hint.hidden && getComputedStyle(hint).display !== 'none' && hint.getBoundingClientRect().height > 0;
  return { shown: shown, text: hint ? hint.textContent.trim() : '', rows: rows.length, hidden: hidden };
})()`

// TestLogScrollHint: when the decisions box holds more rows than fit, a hint
// says how many lie below; scrolled to the end, it goes.
func TestLogScrollHint(t *testing.T) {
	e := start(t, "--policy", "demo=5/60s")
	tb := openTab(t, browser(t), "tab")
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	tb.navigate(e.pageURL())
	e.boundary(t, tb, 60)
	for i := range 5 {
		tb.click("send")
		tb.waitFor(fmt.Sprintf("%d more 429s", i+1), func(s pageState) bool { return len(s.Log) == 7+i })
	}
	waitEval(tb, "the scroll hint to name the rows below", hintJS, func(v hintView) bool {
		return v.Hidden > 0 && v.Shown && v.Text == fmt.Sprintf("↓ %d more rows below: scroll the list", v.Hidden)
	})
	tb.run("scroll the log to its end", chromedp.Evaluate[chromedp.Void](`(() => {
  const log = document.querySelector('[data-testid="log"]');
  log.scrollTop = log.scrollHeight;
})()`))
	waitEval(tb, "the hint to go at the end of the list", hintJS, func(v hintView) bool { return v.Hidden == 0 && !v.Shown })
}

// TestLabMaxExplained: each lane's "max" says what it counts where it is
// shown, not only in the legend under the lanes.
func TestLabMaxExplained(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	for _, w := range []int64{1280, 390} {
		tb.run("viewport", chromedp.EmulateViewport(w, 844))
		tb.openLab(labURL(e.app.URL, e.key, 5, 10, "burst"))
		got := evaluate[[]string](tb, `['log', 'fixed', 'counter', 'gcra', 'bucket'].map((a) => {
  const stat = document.querySelector('[data-testid="lab-max-' + a + '"]').parentElement;
  const r = stat.getBoundingClientRect();
  return (r.width > 0 && r.height > 0 ? '' : 'hidden ') + stat.textContent.replace(/\s+/g, ' ').trim() + ' | ' + (stat.title || '');
})`)
		for _, s := range got {
			if !regexp.MustCompile(`^max \d+ in one window \| the most allowed in any sliding window of the rule's length`).MatchString(s) {
				t.Errorf("at %d px a lane's max reads %q: not explained where it is shown", w, s)
			}
		}
		if p := evaluate[[]string](tb, labLayoutJS); len(p) > 0 {
			t.Errorf("at %d px: %s", w, strings.Join(p, "\n"))
		}
	}
}

// dotsView is where the timeline draws its entries, as the page lays them out.
type dotsView struct {
	Entries  int      `json:"entries"`
	Distinct int      `json:"distinct"` // distinct dot centres, to the pixel
	Outside  []string `json:"outside"`  // dots whose centre lies outside the plot
	Caption  string   `json:"caption"`
}

const dotsJS = `(() => {
  const plot = document.getElementById('tl-plot').getBoundingClientRect();
  const seen = new Set();
  const outside = [];
  const entries = document.querySelectorAll('[data-testid="timeline"] [data-testid="timeline-entry"]');
  for (const e of entries) {
    const r = e.getBoundingClientRect(); // a dot is drawn centred on its element's origin
    seen.add(Math.round(r.left) + ',' + Math.round(r.top));
    if (r.left < plot.left || r.left > plot.right || r.top < plot.top || r.top > plot.bottom) outside.push(e.getAttribute('data-id'));
  }
  return { entries: entries.length, distinct: seen.size, outside: outside.slice(0, 5),
    caption: document.getElementById('tl-caption').textContent };
})()`

// TestBurstFansOut: after "Race naive" the window holds far more than the
// limit, recorded within a few milliseconds; every entry gets a dot of its
// own inside the plot instead of a handful of stacks.
func TestBurstFansOut(t *testing.T) {
	e := start(t, "--policy", "demo=5/60s")
	tb := openTab(t, browser(t), "tab")
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	tb.navigate(e.pageURL())
	tb.click("race-naive")
	var ids []string
	deadline := time.Now().Add(waitTimeout)
	for {
		if s := tb.state(); len(s.IDs) > 7 {
			if ids = memberIDs(e.members(t)); sameSet(s.IDs, ids) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for the naive race's entries on the timeline; the ZSET holds %d", waitTimeout, len(ids))
		}
		time.Sleep(pollEvery)
	}
	if len(ids) <= 2*7 {
		t.Fatalf("the naive race let only %d through: too few to show a fan", len(ids))
	}
	v := waitEval(tb, fmt.Sprintf("%d dots each in a place of its own inside the plot", len(ids)), dotsJS, func(v dotsView) bool {
		return v.Entries == len(ids) && v.Distinct == len(ids) && len(v.Outside) == 0 && strings.Contains(v.Caption, "fan out")
	})
	t.Logf("%d entries, %d distinct dots; caption %q", v.Entries, v.Distinct, v.Caption)
}

// TestLabSurvivesReload: a lab's requests of the last window come back after
// a reload, and reach a tab that joins later, each mark allowed or denied
// alike; a reset empties them for tabs that join after it.
func TestLabSurvivesReload(t *testing.T) {
	e := start(t)
	one := openTab(t, browser(t), "tab 1")
	u := labURL(e.app.URL, e.key, 3, 60, "burst") // a long window: nothing expires meanwhile
	one.openLab(u)
	a := one.runLab(6, waitTimeout)
	same := func(s labState) bool {
		for _, alg := range labAlgorithms {
			if !slices.Equal(s.Marks[alg], a.Marks[alg]) {
				return false
			}
		}
		return true
	}
	one.openLab(u)
	b := one.waitLab(waitTimeout, "the run's marks after a reload", same)
	for _, alg := range labAlgorithms {
		if b.Counts[alg] != a.Counts[alg] || b.Maxes[alg] != a.Maxes[alg] {
			t.Errorf("%s after a reload: %s allowed, max %s; before %s, max %s", alg, b.Counts[alg], b.Maxes[alg], a.Counts[alg], a.Maxes[alg])
		}
	}
	two := openTab(t, one.ctx, "tab 2")
	two.openLab(u)
	two.waitLab(waitTimeout, "the run's marks in a tab that joins later", same)

	req, err := http.NewRequest(http.MethodDelete, e.app.URL+"/api/v1/lab?lab="+url.QueryEscape(e.key), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /api/v1/lab: %s", resp.Status)
	}
	three := openTab(t, one.ctx, "tab 3")
	three.openLab(u)
	time.Sleep(time.Second) // what a snapshot would bring has arrived by now
	if s := three.labState(); len(s.Marks["log"]) != 0 {
		t.Errorf("after a reset a tab that joins shows %d marks, want none", len(s.Marks["log"]))
	}
}

// TestCaptionNamesTheDots: while entries are drawn one by one, the caption
// under the timeline names as many as there are dots in every frame — not
// "The window is empty." beside the boundary test's five.
func TestCaptionNamesTheDots(t *testing.T) {
	e := start(t, "--policy", "demo=5/60s")
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	tb.waitFor("an empty window", func(s pageState) bool { return s.Count == "0 / 5" })
	// Sample every frame from just before the boundary test's requests until
	// a second after its last dot landed.
	tb.run("watch the caption every frame", chromedp.Evaluate[chromedp.Void](`(() => {
  window.__captions = [];
  const tl = document.querySelector('[data-testid="timeline"]');
  const cap = document.getElementById('tl-caption');
  const frame = () => {
    const dots = tl.querySelectorAll('[data-testid="timeline-entry"]').length;
    const m = /^(\d+) entr/.exec(cap.textContent);
    const named = m ? Number(m[1]) : /empty/.test(cap.textContent) ? 0 : -1;
    window.__captions.push([dots, named]);
    if (window.__captions.length < 100000) requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
})()`))
	e.boundary(t, tb, 60)
	time.Sleep(time.Second)
	samples := evaluate[[][2]int](tb, `window.__captions.splice(0)`)
	wrong := 0
	var first [2]int
	for _, s := range samples {
		if s[0] != s[1] {
			if wrong == 0 {
				first = s
			}
			wrong++
		}
	}
	if wrong > 0 {
		t.Errorf("in %d of %d frames the caption named another count than the dots drawn (first: %d dots, caption %d)", wrong, len(samples), first[0], first[1])
	}
}
