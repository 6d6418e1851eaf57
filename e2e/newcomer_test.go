package e2e_test

// What a newcomer's second hour with the page found: one wait per state,
// "Last request" for checks sent from anywhere, a decisions box that shows
// rows, rates too small for "/s" shown as counts, and the lab's axis on the
// traffic it ran.

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// waitsFrame is the page's waits as one frame shows them.
type waitsFrame struct {
	RingMs  float64  `json:"ringMs"`  // the ring's data-remaining-ms
	Wait    string   `json:"wait"`    // the boundary result's live wait
	Figures []string `json:"figures"` // every other seconds figure on the page, with what stands before it
}

// waitsJS samples ten frames of the page: the ring, the boundary result's
// wait, and every other visible "N s" figure with the words before it.
const waitsJS = `new Promise((resolve) => {
  const out = [];
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  const frame = () => {
    const wait = q('boundary-result').querySelector('[data-testid="wait-left"]');
    const text = Array.from(document.querySelectorAll('.window-card, .actions-card, .log-card'), (c) => {
      const copy = c.cloneNode(true);
      for (const el of copy.querySelectorAll('.ring-value, [data-testid="wait-left"], .caption, [hidden], select')) el.remove();
      return copy.innerText;
    }).join('\n');
    const figures = [];
    for (const m of text.matchAll(/(\S+\s+)?\S*\d+(\.\d+)?\s?s\b/g)) figures.push(m[0]);
    out.push({ ringMs: Number(q('ring').getAttribute('data-remaining-ms')), wait: wait ? wait.textContent : '', figures: figures });
    if (out.length < 10) requestAnimationFrame(frame); else resolve(out);
  };
  requestAnimationFrame(frame);
})`

// labelled: a seconds figure that says what it is — a rule ("5 per 10s"),
// the Retry-After header in whole seconds, a window, or an offset on the
// timeline's axis ("−12 s").
var labelled = regexp.MustCompile(`(^|\s)(per|Retry-After:|window)\s+\d|[−+]\d+(\.\d+)?\s?s$`)

// TestOneWaitAtATime: after the boundary test the page shows one wait — the
// exact one, in the ring and in the boundary result alike — and names any
// other seconds figure for what it is (the header's whole seconds, a rule).
func TestOneWaitAtATime(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	tb.waitFor("an empty window", func(s pageState) bool { return s.Count == "0 / 5" })
	e.boundary(t, tb, 10)
	s := tb.state()
	if !strings.Contains(s.Boundary, "Retry-After: 10 (whole seconds, rounded up)") {
		t.Errorf("boundary result %q does not label the Retry-After header as whole seconds", s.Boundary)
	}
	for i, v := range evaluate[[]waitsFrame](tb, waitsJS, chromedp.EvalAwaitPromise) {
		ms, ok := waitMs(v.Wait)
		if !ok {
			t.Fatalf("frame %d: the boundary result's wait reads %q, want \"retry in N.N s\" counting down", i, v.Wait)
		}
		if math.Abs(ms-v.RingMs) > 100 {
			t.Errorf("frame %d: the boundary result waits %q but the ring %.0f ms: two waits", i, v.Wait, v.RingMs)
		}
		for _, f := range v.Figures {
			if !labelled.MatchString(f) {
				t.Errorf("frame %d: the seconds figure %q is shown without saying what it is", i, f)
			}
		}
	}
}

var waitRE = regexp.MustCompile(`^retry in ([0-9]+\.[0-9]) s$`)

// waitMs reads "retry in 9.8 s" as 9800.
func waitMs(s string) (float64, bool) {
	m := waitRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	var v float64
	for _, c := range m[1] {
		if c != '.' {
			v = v*10 + float64(c-'0')
		}
	}
	return v * 100, true
}

// lastRequestJS reads "Last request" as the page shows it.
const lastRequestJS = `document.getElementById('send-result').textContent.trim()`

// TestLastRequestFollowsTheWindow: a check sent from outside the page (here
// over HTTP from the test, as curl or another instance would) shows under
// "Last request" within a second or so — an allowed one, then a denial.
func TestLastRequestFollowsTheWindow(t *testing.T) {
	e := start(t, "--policy", "demo=1/60s")
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	tb.waitFor("a live stream on an empty window", func(s pageState) bool { return s.Status == "live" && s.Count == "0 / 1" })
	if v := evaluate[string](tb, lastRequestJS); v != "" {
		t.Fatalf("before any check, Last request reads %q", v)
	}
	for _, want := range []string{"200 allowed · 1 / 1", "429 denied: retry in"} {
		sendChecks(t, e.app.URL, "demo", e.key, 1)
		// Decisions reach the page in milliseconds; the deadline only
		// leaves room for a loaded machine.
		deadline := time.Now().Add(3 * time.Second)
		for v := evaluate[string](tb, lastRequestJS); !strings.HasPrefix(v, want); v = evaluate[string](tb, lastRequestJS) {
			if time.Now().After(deadline) {
				t.Fatalf("after a check from outside the page, Last request reads %q, want it to start %q", v, want)
			}
			time.Sleep(pollEvery)
		}
	}
}

// logRowsView is how many of the decisions log's rows a viewport shows.
type logRowsView struct {
	Rows    int        `json:"rows"`    // rows in the list
	Visible int        `json:"visible"` // rows wholly inside the box and the viewport
	Box     [2]float64 `json:"box"`     // the box's top and bottom
	Row     float64    `json:"row"`     // the first row's height
}

const logRowsJS = `(() => {
  const log = document.querySelector('[data-testid="log"]');
  const box = log.getBoundingClientRect();
  const top = Math.max(box.top, 0), bottom = Math.min(box.bottom, window.innerHeight);
  const rows = Array.from(log.querySelectorAll('[data-testid="log-entry"]'));
  const visible = rows.filter((li) => { const r = li.getBoundingClientRect(); return r.height > 0 && r.top >= top - 0.5 && r.bottom <= bottom + 0.5; }).length;
  return { rows: rows.length, visible: visible, box: [box.top, box.bottom], row: rows.length ? rows[0].getBoundingClientRect().height : 0 };
})()`

// TestDecisionsBoxShowsRows: on a 1280×1000 screen the decisions box, with
// the page at its top, shows at least six whole rows of a busy log.
func TestDecisionsBoxShowsRows(t *testing.T) {
	e := start(t, "--policy", "demo=5/60s")
	tb := openTab(t, browser(t), "tab")
	tb.run("emulate a 1280×1000 viewport", chromedp.EmulateViewport(1280, 1000))
	tb.navigate(e.pageURL())
	tb.waitFor("an empty window", func(s pageState) bool { return s.Count == "0 / 5" })
	e.boundary(t, tb, 60)
	sendChecks(t, e.app.URL, "demo", e.key, 3)
	// Polled: a row that just came in slides into place.
	waitEval(tb, "six whole rows of nine in view in the decisions box", logRowsJS, func(v logRowsView) bool { return v.Rows >= 9 && v.Visible >= 6 })
}

// overviewFewJS reads the few policy's rates and the instance count.
const overviewFewJS = `(() => {
  const card = document.querySelector('[data-testid="overview-policy-few"]');
  const v = (r) => { const el = card && card.querySelector('[data-rate="' + r + '"] .ov-rate-value'); return el ? el.textContent.trim() : ''; };
  const head = document.querySelector('.topbar-meta .viewers');
  return { allowed: v('allowed'), denied: v('denied'), instances: head ? head.textContent.replace(/\s+/g, ' ').trim() : '' };
})()`

type overviewFew struct {
	Allowed   string `json:"allowed"`
	Denied    string `json:"denied"`
	Instances string `json:"instances"`
}

// TestOverviewCountsAFew: a handful of checks in the last minute reads as
// counts ("3 in the last minute"), not "0.0/s" beside the sparkline's
// spike, and one instance reads "1 instance".
func TestOverviewCountsAFew(t *testing.T) {
	e := start(t, "--policy", "few=1/1m")
	sendChecks(t, e.app.URL, "few", "k", 4)
	tb := openTab(t, browser(t), "overview")
	tb.run("open the overview", chromedp.Navigate(e.app.URL+"/overview?policy=few"))
	counted := regexp.MustCompile(`^[1-9][0-9]* in the last minute$`)
	// The overview learns of the checks on its next refresh: wait for them.
	v := waitEval(tb, "the few policy's rates as counts", overviewFewJS, func(v overviewFew) bool {
		return v.Allowed == "1 in the last minute" && counted.MatchString(v.Denied) && v.Instances != ""
	})
	// Read once more after a live update has redrawn the page.
	time.Sleep(1500 * time.Millisecond)
	for _, v := range []overviewFew{v, evaluate[overviewFew](tb, overviewFewJS)} {
		if v.Allowed != "1 in the last minute" || !counted.MatchString(v.Denied) {
			t.Errorf("the few policy reads allowed %q, denied %q; want \"1 in the last minute\" and a count of denials, not a rate that rounds to 0", v.Allowed, v.Denied)
		}
		if v.Instances != "1 instance" {
			t.Errorf("the overview's head reads %q, want \"1 instance\"", v.Instances)
		}
	}
}

// labSpreadJS measures the fixed lane after a run: how much of its width
// the marks spread over, and where its window edges are, as fractions of
// the lane's width (0 its left end, 1 its right).
const labSpreadJS = `(() => {
  const lane = document.querySelector('[data-testid="lab-lane-fixed"]');
  const box = lane.getBoundingClientRect();
  const at = (el) => { const r = el.getBoundingClientRect(); return (r.left + r.width / 2 - box.left) / box.width; };
  const marks = Array.from(lane.querySelectorAll('[data-testid="lab-mark"]'), at);
  return { marks: marks.length, spread: marks.length ? Math.max(...marks) - Math.min(...marks) : 0,
    edges: Array.from(lane.querySelectorAll('.lab-edge'), at) };
})()`

type labSpread struct {
	Marks  int       `json:"marks"`
	Spread float64   `json:"spread"`
	Edges  []float64 `json:"edges"`
}

// TestLabAxisOnTheTraffic: after the boundary run the lab's axis is the
// traffic's: its ten requests spread over much of the lane, not within a
// few pixels of a 20 s axis, and the fixed window's edge they straddle is
// drawn inside it.
func TestLabAxisOnTheTraffic(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	tb.openLab(labURL(e.app.URL, e.key, 5, 10, "boundary"))
	tb.run("choose boundary traffic", chromedp.SetValue(byTestID("lab-traffic"), "boundary"))
	if s := tb.runLab(10, 45*time.Second); s.Maxes["fixed"] != "10" {
		t.Fatalf("lab-max-fixed %q: the run did not straddle an edge", s.Maxes["fixed"])
	}
	v := evaluate[labSpread](tb, labSpreadJS)
	if v.Marks != 10 || v.Spread < 0.3 {
		t.Errorf("the ten boundary requests spread over %.1f %% of the lane (%d marks), want more than 30 %%", 100*v.Spread, v.Marks)
	}
	inside := 0
	for _, x := range v.Edges {
		if x > 0 && x < 1 {
			inside++
		}
	}
	if inside == 0 {
		t.Errorf("no fixed-window edge inside the lane: edges at %v of its width", v.Edges)
	}
}
