package e2e_test

// The probe: how smooth a page is, measured from inside it — frames painted
// (requestAnimationFrame callbacks), long tasks (a PerformanceObserver of
// type 'longtask'), the DOM's size — and which WebSockets it opened, all
// read through Runtime.evaluate. Any browser test can use it.

import (
	"context"
	"fmt"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// probeResult is what the page measured between startProbe and read.
type probeResult struct {
	Seconds       float64 `json:"seconds"`
	Frames        int     `json:"frames"`
	FPS           float64 `json:"fps"`
	MaxFrameGapMs float64 `json:"maxFrameGapMs"` // the longest time between two frames
	LongTasks     int     `json:"longTasks"`     // tasks over 50 ms (the browser's definition)
	LongestTaskMs float64 `json:"longestTaskMs"`
	DOM           int     `json:"dom"`    // elements now
	MaxDOM        int     `json:"maxDom"` // the most elements seen, sampled every 100 ms
}

func (r probeResult) String() string {
	return fmt.Sprintf("%.1f fps (%d frames in %.1f s, longest gap %.0f ms), %d long tasks (longest %.0f ms), DOM %d elements (at most %d)",
		r.FPS, r.Frames, r.Seconds, r.MaxFrameGapMs, r.LongTasks, r.LongestTaskMs, r.DOM, r.MaxDOM)
}

const probeStartJS = `(() => {
  if (window.__probe) window.__probe.stop();
  const p = { frames: 0, t0: performance.now(), last: performance.now(), maxGap: 0, long: 0, longest: 0, maxDom: 0, stopped: false };
  const frame = (ts) => {
    if (p.stopped) return;
    p.frames++;
    const now = performance.now();
    p.maxGap = Math.max(p.maxGap, now - p.last);
    p.last = now;
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      p.long++;
      p.longest = Math.max(p.longest, e.duration);
    }
  });
  obs.observe({ type: 'longtask' });
  const dom = () => { p.maxDom = Math.max(p.maxDom, document.getElementsByTagName('*').length); };
  dom();
  const timer = setInterval(dom, 100);
  p.stop = () => { p.stopped = true; obs.disconnect(); clearInterval(timer); };
  window.__probe = p;
  return true;
})()`

const probeReadJS = `(() => {
  const p = window.__probe;
  const now = performance.now();
  const n = document.getElementsByTagName('*').length;
  p.maxDom = Math.max(p.maxDom, n);
  const secs = (now - p.t0) / 1000;
  return { seconds: secs, frames: p.frames, fps: p.frames / secs, maxFrameGapMs: Math.max(p.maxGap, now - p.last),
    longTasks: p.long, longestTaskMs: p.longest, dom: n, maxDom: p.maxDom };
})()`

// startProbe starts measuring now, from scratch.
func startProbe(tb *tab) {
	tb.t.Helper()
	evaluate[bool](tb, probeStartJS)
}

// readProbe returns what was measured since startProbe; it keeps measuring.
func readProbe(tb *tab) probeResult {
	tb.t.Helper()
	return evaluate[probeResult](tb, probeReadJS)
}

// socketWatchJS records every WebSocket the page opens: its URL, whether it
// opened, and its close code and reason if it closed.
const socketWatchJS = `(() => {
  const Native = window.WebSocket;
  const seen = window.__e2eSockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      const r = { url: String(args[0]), open: false, closed: '' };
      seen.push(r);
      this.addEventListener('open', () => { r.open = true; });
      this.addEventListener('close', (e) => { r.open = false; r.closed = e.code + ' ' + e.reason; });
    }
  };
})()`

type socketRecord struct {
	URL    string `json:"url"`
	Open   bool   `json:"open"`
	Closed string `json:"closed"`
}

// watchSockets records the WebSockets of every document the tab loads from
// now on; call it before navigate.
func watchSockets(tb *tab) {
	tb.t.Helper()
	tb.do("install the WebSocket recorder", func(ctx context.Context) error {
		_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: socketWatchJS,
		})
		return err
	})
}

// sockets returns the WebSockets the page has opened so far.
func sockets(tb *tab) []socketRecord {
	tb.t.Helper()
	return evaluate[[]socketRecord](tb, `window.__e2eSockets || []`)
}
