package e2e_test

// The page under a busy window (SPEC §5, issue 10): tens of thousands of
// entries and a thousand checks a second must not slow it, grow its DOM, or
// let what it shows fall behind the server.

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ratescope/ratescope/internal/testload"
)

var rateRE = regexp.MustCompile(`^([0-9,]+)/s allowed · ([0-9,]+)/s denied`)

// timelineInfo is what the timeline shows beyond pageState.
type timelineInfo struct {
	Count   int    `json:"count"` // data-count
	Mode    string `json:"mode"`
	Caption string `json:"caption"`
	Rate    string `json:"rate"`
}

func timeline(tb *tab) timelineInfo {
	tb.t.Helper()
	return evaluate[timelineInfo](tb, `(() => {
  const tl = document.querySelector('[data-testid="timeline"]');
  const cap = document.getElementById('tl-caption');
  const rate = document.querySelector('[data-testid="rate"]');
  return { count: Number(tl.getAttribute('data-count')), mode: tl.dataset.mode || '', caption: cap ? cap.textContent : '',
    rate: rate ? rate.textContent.replace(/\s+/g, ' ').trim() : '' };
})()`)
}

// layoutProblems lists text that overlaps other text or leaves its card: the
// cells of each log row against each other, and the readouts against their
// card's edges.
const layoutProblemsJS = `(() => {
  const out = [];
  // The box of what an element shows: its text may overflow the element.
  const r = (el) => {
    const range = document.createRange();
    range.selectNodeContents(el);
    const a = el.getBoundingClientRect(), b = range.getBoundingClientRect();
    if (b.width === 0 && b.height === 0) return a;
    return { left: Math.min(a.left, b.left), right: Math.max(a.right, b.right), top: Math.min(a.top, b.top), bottom: Math.max(a.bottom, b.bottom) };
  };
  const box = (el) => el.getBoundingClientRect();
  const overlap = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
  const name = (el) => el.className || el.tagName;
  for (const li of document.querySelectorAll('[data-testid="log-entry"]')) {
    const cells = Array.from(li.children);
    for (let i = 0; i < cells.length; i++) {
      for (let j = i + 1; j < cells.length; j++) {
        if (overlap(r(cells[i]), r(cells[j]))) out.push('log row "' + li.textContent + '": ' + name(cells[i]) + ' overlaps ' + name(cells[j]));
      }
      if (r(cells[i]).right > box(li).right + 0.5) out.push('log row "' + li.textContent + '": ' + name(cells[i]) + ' runs past the row');
    }
  }
  for (const id of ['count', 'clock', 'rate', 'viewers', 'status']) {
    const el = document.querySelector('[data-testid="' + id + '"]');
    if (!el) {
      out.push('no element with testid ' + id);
      continue;
    }
    const card = el.closest('.card, .topbar');
    if (card && (r(el).right > box(card).right + 0.5 || r(el).left < box(card).left - 0.5)) {
      out.push(id + ' "' + el.textContent.trim() + '" runs past its card (' + Math.round(r(el).right) + ' > ' + Math.round(box(card).right) + ')');
    }
  }
  if (document.documentElement.scrollWidth > window.innerWidth) out.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + window.innerWidth);
  return out.slice(0, 20);
})()`

// TestBusyWindow: a 30000/1m window holding more than 20,000 entries that
// receives over 1,000 checks a second, allowed and denied, for 10 s. The
// page keeps at least 30 fps, no task over 200 ms, fewer than 3,000
// elements, its clock within 1 s of the server's, both rates shown, and its
// one WebSocket open. Screenshots at 1280 and 390 px (RATESCOPE_SCREENSHOT=1
// writes them to docs/).
func TestBusyWindow(t *testing.T) {
	const (
		seeded    = 28_000
		minCount  = 20_000
		rate      = 1_250
		measured  = 10 * time.Second
		attempts  = 5
		minFPS    = 30
		maxTaskMs = 200
		maxDOM    = 3000
	)
	e := start(t, busyArgs...)
	// Spread over the whole minute: they slide out from the start (some 470
	// a second), and the checks allowed in their place keep the window full,
	// so the load is both allowed and denied.
	e.seed(t, seeded, time.Minute)
	tb := openTab(t, browser(t), "tab")
	watchSockets(tb)
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	tb.navigate(e.busyURL())
	info := timeline(tb)
	deadline := time.Now().Add(waitTimeout)
	for info.Count < minCount && time.Now().Before(deadline) {
		time.Sleep(pollEvery)
		info = timeline(tb)
	}
	if info.Count < minCount || info.Mode != "band" {
		t.Fatalf("with %d entries seeded the timeline shows data-count %d in mode %q, want ≥ %d as a band", seeded, info.Count, info.Mode, minCount)
	}

	control := openTab(t, browser(t), "control")
	control.run("open a blank page", chromedp.Navigate("about:blank"))

	stop := make(chan struct{})
	stopLoad := sync.OnceFunc(func() { close(stop) })
	t.Cleanup(stopLoad) // also when the test ends early
	done := make(chan *loadStats, 1)
	st := &loadStats{}
	go func() { done <- e.load(t, rate, stop, st) }()
	began := time.Now()
	time.Sleep(time.Second) // let the load reach its pace

	// On a machine that other work keeps busy, any page can be preempted for
	// a few hundred ms, and the load may fall short of its pace; up to five
	// 10 s windows are measured, and the page must meet every bound in one
	// that got its 1,000 checks/s (a page that cannot, as before issue 10 —
	// no frame for 15–60 s — fails them all).
	var res, blank probeResult // the last window that got its checks
	loaded, best := false, 0.0
	for attempt := 1; attempt <= attempts; attempt++ {
		answered0 := st.allowed.Load() + st.denied.Load()
		startProbe(control)
		startProbe(tb)
		at := time.Now()
		time.Sleep(measured)
		r := readProbe(tb)
		ctl := readProbe(control)
		got := float64(st.allowed.Load()+st.denied.Load()-answered0) / time.Since(at).Seconds()
		info = timeline(tb)
		t.Logf("window %d: %.0f checks/s answered, data-count %d; the page: %s; a blank page meanwhile: %s", attempt, got, info.Count, r, ctl)
		if info.Count < minCount {
			t.Fatalf("the window holds %d entries, want ≥ %d: the test did not test what it says", info.Count, minCount)
		}
		best = max(best, got)
		if got < 1000 {
			t.Logf("window %d: the load reached %.0f answered checks/s, short of 1,000: the machine is too busy to count it", attempt, got)
			continue
		}
		loaded, res, blank = true, r, ctl
		if res.FPS >= fpsBound(minFPS, blank) && res.LongestTaskMs <= taskBound(maxTaskMs, blank) && res.MaxDOM < maxDOM {
			break
		}
	}
	if !loaded {
		testload.Skip(t, fmt.Sprintf("no window got 1,000 answered checks/s (at best %.0f): the machine is too busy to test a busy window", best))
	}
	if bound := fpsBound(minFPS, blank); res.FPS < bound {
		testload.Miss(t, fmt.Sprintf("%.1f fps under load, want ≥ %.1f (%d, less what a blank page lost meanwhile: it drew %.1f)", res.FPS, bound, minFPS, blank.FPS))
	}
	if bound := taskBound(maxTaskMs, blank); res.LongestTaskMs > bound {
		testload.Miss(t, fmt.Sprintf("a long task of %.0f ms, want none over %.0f ms (%d, plus the longest a blank page went without a frame meanwhile)", res.LongestTaskMs, bound, maxTaskMs))
	}
	if res.MaxDOM >= maxDOM {
		t.Errorf("the DOM reached %d elements, want fewer than %d", res.MaxDOM, maxDOM)
	}

	s := tb.state()
	info = timeline(tb)
	t.Logf("timeline: data-count %d, mode %s; caption: %s; rate: %s; count: %s; status: %s", info.Count, info.Mode, info.Caption, info.Rate, s.Count, s.Status)
	clockWithin(t, e, tb, 1000)
	if m := rateRE.FindStringSubmatch(info.Rate); m == nil || m[1] == "0" || m[2] == "0" {
		t.Errorf("rate reads %q, want both allowed and denied checks per second", info.Rate)
	}
	if s.Status != "live" {
		t.Errorf("status reads %q under load, want live", s.Status)
	}
	if n := len(s.Log); n == 0 || n > 50 {
		t.Errorf("the log holds %d entries, want the newest 50", n)
	}
	if len(s.IDs) != 0 {
		t.Errorf("%d timeline-entry elements with a window of more than 20,000 entries, want none", len(s.IDs))
	}
	if !strings.Contains(info.Caption, "band") {
		t.Errorf("the caption %q does not say the entries are drawn as a band", info.Caption)
	}
	if p := evaluate[[]string](tb, layoutProblemsJS); len(p) > 0 {
		t.Errorf("at 1280 px: %s", strings.Join(p, "\n"))
	}
	shot(t, tb, 1280, "busy-1280.png")
	tb.run("emulate a 390×844 viewport", chromedp.EmulateViewport(390, 844))
	tb.waitFor("a 390 px viewport", func(s pageState) bool { return s.InnerW == 390 })
	time.Sleep(500 * time.Millisecond) // a log render with the new widths
	if p := evaluate[[]string](tb, layoutProblemsJS); len(p) > 0 {
		t.Errorf("at 390 px: %s", strings.Join(p, "\n"))
	}
	// The first screen of a phone: the window card, which the README shows.
	evaluate[bool](tb, `(window.scrollTo(0, 0), true)`)
	shotOf(t, tb, chromedp.CaptureScreenshot(), 390, "busy-390.png")

	stopLoad()
	<-done
	elapsed := time.Since(began)
	got := float64(st.allowed.Load()+st.denied.Load()) / elapsed.Seconds()
	t.Logf("load: %d checks in %s (%.0f/s answered): %d allowed, %d denied, %d other", st.sent.Load(), elapsed.Round(time.Millisecond), got, st.allowed.Load(), st.denied.Load(), st.other.Load())
	if st.allowed.Load() == 0 || st.denied.Load() == 0 || st.other.Load() > 0 {
		t.Errorf("answers: %d allowed, %d denied, %d other (first: %v), want allowed and denied only", st.allowed.Load(), st.denied.Load(), st.other.Load(), st.firstOther.Load())
	}
	ws := sockets(tb)
	if len(ws) != 1 || !ws[0].Open {
		t.Errorf("the page's WebSockets: %+v, want one, still open", ws)
	}
	if t.Failed() {
		t.Logf("page state: %s", fmt.Sprint(tb.state()))
	}
}

// TestIdleBusyWindow: a window of 1,200 entries and no traffic paints at the
// display's 60 fps. The bound is 55, not 60: a headless requestAnimationFrame
// on a loaded machine misses the odd frame even for an empty page — and less
// by as much as a blank page measured beside it falls short (fpsBound).
func TestIdleBusyWindow(t *testing.T) {
	const seeded = 1200
	e := start(t, busyArgs...)
	e.seed(t, seeded, 30*time.Second)
	tb := openTab(t, browser(t), "tab")
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	tb.navigate(e.busyURL())
	deadline := time.Now().Add(waitTimeout)
	for info := timeline(tb); info.Count != seeded; info = timeline(tb) {
		if time.Now().After(deadline) {
			t.Fatalf("data-count reads %d, want %d", info.Count, seeded)
		}
		time.Sleep(pollEvery)
	}
	control := openTab(t, browser(t), "control")
	control.run("open a blank page", chromedp.Navigate("about:blank"))
	time.Sleep(time.Second) // past the start-up's layout and first draws
	// Other work on the machine takes frames from a page that draws more than
	// from a blank one: up to three tries of 5 s, the best one judged.
	var res, blank probeResult
	var bound float64
	for try := 1; try <= 3; try++ {
		startProbe(control)
		startProbe(tb)
		time.Sleep(5 * time.Second)
		r, b := readProbe(tb), readProbe(control)
		t.Logf("try %d: idle with %d entries: %s; a blank page meanwhile: %s", try, seeded, r, b)
		if try == 1 || r.FPS-fpsBound(55, b) > res.FPS-bound {
			res, blank, bound = r, b, fpsBound(55, b)
		}
		if res.FPS >= bound {
			break
		}
	}
	if res.FPS < bound {
		msg := fmt.Sprintf("%.1f fps idle with %d entries, want 60 (≥ %.1f: 55 allowing for headless timing, less what a blank page lost meanwhile: it drew %.1f)", res.FPS, seeded, bound, blank.FPS)
		testload.Miss(t, msg)
	}
	if info := timeline(tb); info.Mode != "band" {
		t.Errorf("with %d entries the timeline is in mode %q, want band", seeded, info.Mode)
	}
}

// TestFramesStopped: while no frame runs (a background tab), a busy stream
// grows neither the DOM nor the heap; when frames resume, one frame draws
// it all, without a long task.
func TestFramesStopped(t *testing.T) {
	const frameless = 8 * time.Second
	e := start(t, busyArgs...)
	e.seed(t, 5000, 30*time.Second)
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.busyURL())
	tb.waitFor("the seeded window", func(pageState) bool { return timeline(tb).Count >= 5000 })

	// Warm up: the first decisions size the page's buffers and fill the log.
	stop := make(chan struct{})
	stopLoad := sync.OnceFunc(func() { close(stop) })
	t.Cleanup(stopLoad) // also when the test ends early
	done := make(chan *loadStats, 1)
	go func() { done <- e.load(t, 800, stop, &loadStats{}) }()
	time.Sleep(2 * time.Second)
	evaluate[bool](tb, `(() => { window.__e2eRAF = window.requestAnimationFrame; window.requestAnimationFrame = () => 0; return true; })()`)
	time.Sleep(200 * time.Millisecond) // the frame already requested runs
	dom := readDOM(tb)
	heap := heapAfterGC(tb)
	time.Sleep(frameless)
	domAfter := readDOM(tb)
	heapAfter := heapAfterGC(tb)
	t.Logf("without frames for %s: DOM %d → %d elements, JS heap %.2f → %.2f MB", frameless, dom, domAfter, heap/1e6, heapAfter/1e6)
	if domAfter != dom {
		t.Errorf("the DOM went from %d to %d elements while no frame ran: messages wrote to it", dom, domAfter)
	}
	// Bounded means it holds at most the latest states: a parsed snapshot of
	// 1,000 entries is ~0.3 MB, and the heap reads 1.27 or 1.56 MB by whether
	// one is held at that moment. Keeping the 6,400 decisions of these 8 s
	// instead would take well over 1 MB.
	if grew := heapAfter - heap; grew > 600e3 {
		t.Errorf("the JS heap grew by %.1f MB while no frame ran, want a bounded state", grew/1e6)
	}

	evaluate[bool](tb, `(() => { window.requestAnimationFrame = window.__e2eRAF; document.dispatchEvent(new Event('visibilitychange')); return true; })()`)
	startProbe(tb)
	time.Sleep(2 * time.Second)
	res := readProbe(tb)
	stopLoad()
	st := <-done
	t.Logf("after frames resumed: %s; load: %d allowed, %d denied", res, st.allowed.Load(), st.denied.Load())
	if res.Frames < 10 {
		testload.Miss(t, fmt.Sprintf("%d frames in the 2 s after frames resumed", res.Frames))
	}
	if res.LongestTaskMs > 200 {
		testload.Miss(t, fmt.Sprintf("a long task of %.0f ms when frames resumed, want none over 200 ms", res.LongestTaskMs))
	}
	s := tb.state()
	if len(s.Log) != 50 {
		t.Errorf("the log holds %d entries after the burst, want the newest 50", len(s.Log))
	}
	if s.Status != "live" {
		t.Errorf("status reads %q, want live", s.Status)
	}
}

// fpsBound is the frame rate a page must reach: want, less the share of the
// display's frames that a blank page, measured at the same time, did not get
// — other work on the machine takes frames from every page alike, and a page
// that cannot keep up on its own (no frame for seconds) still fails.
func fpsBound(want float64, blank probeResult) float64 { return want * min(1, blank.FPS/58) }

// taskBound is the longest task a page may run: want, plus the longest a
// blank page measured at the same time went without a frame beyond the
// display's 17 ms — a stall the machine imposed on every page alike.
func taskBound(want float64, blank probeResult) float64 {
	return want + max(0, blank.MaxFrameGapMs-17)
}
