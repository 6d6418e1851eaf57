package e2e_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// algoViewJS reads what the page says about the watched policy's algorithm:
// the algorithm element, the selected option, and whether the state canvas
// is shown and has anything drawn on it.
const algoViewJS = `(() => {
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  const c = document.getElementById('tl-algo');
  let painted = false;
  if (c && c.width > 0 && c.height > 0) {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < d.length; i += 4) if (d[i] !== 0) { painted = true; break; }
  }
  const sel = q('policy');
  return {
    algorithm: q('algorithm').textContent.trim(),
    option: sel.options[sel.selectedIndex].textContent.trim(),
    shown: !!c && getComputedStyle(c).display !== 'none',
    painted: painted,
    caption: document.getElementById('tl-caption').textContent.trim(),
    timelineCount: q('timeline').getAttribute('data-count'),
    redisKey: document.getElementById('zset-key').textContent.trim(),
  };
})()`

type algoView struct {
	Algorithm     string `json:"algorithm"`
	Option        string `json:"option"`
	Shown         bool   `json:"shown"`
	Painted       bool   `json:"painted"`
	Caption       string `json:"caption"`
	TimelineCount string `json:"timelineCount"`
	RedisKey      string `json:"redisKey"`
}

// TestPageEveryAlgorithm: with one policy per algorithm, the page names the
// algorithm it shows, counts each up to limit / limit, logs the 429 and
// counts the ring down, draws the state of the algorithms that keep no
// entries, switches between them through the picker, and throws nothing.
func TestPageEveryAlgorithm(t *testing.T) {
	const limit = 3
	policies := []struct{ name, algorithm string }{
		{"plog", "log"}, {"pfixed", "fixed"}, {"pcounter", "counter"}, {"pgcra", "gcra"}, {"pbucket", "bucket"},
	}
	var args []string
	for _, p := range policies {
		spec := fmt.Sprintf("%s=%d/1h", p.name, limit)
		if p.algorithm != "log" {
			spec += "@" + p.algorithm
		}
		args = append(args, "--policy", spec)
	}
	e := start(t, args...)
	tb := openTab(t, browser(t), "tab")
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	full := fmt.Sprintf("%d / %d", limit, limit)
	for i, p := range policies {
		if i == 0 {
			tb.navigate(e.app.URL + "/?key=" + url.QueryEscape(e.key) + "&policy=" + p.name)
		} else { // switch through the picker, as a visitor does
			pick(tb, p.name)
			tb.waitFor(p.name+": the stream is live", func(s pageState) bool { return s.Status == "live" })
		}
		tb.waitFor(p.name+": count 0 / 3 on a fresh window", func(s pageState) bool { return s.Count == "0 / 3" && len(s.Log) == 0 })
		v := evaluate[algoView](tb, algoViewJS)
		if v.Algorithm != p.algorithm || !strings.HasPrefix(v.Option, p.name+" ("+p.algorithm+")") {
			t.Fatalf("%s: algorithm reads %q, option %q; want %s", p.name, v.Algorithm, v.Option, p.algorithm)
		}
		redisKey := "rate_limit:{" + e.key + "}:" + p.name
		if p.algorithm != "log" {
			redisKey += ":" + p.algorithm
		}
		if v.RedisKey != redisKey {
			t.Errorf("%s: the page names the Redis key %q, want %q", p.name, v.RedisKey, redisKey)
		}
		for n := 1; n <= limit+1; n++ {
			tb.click("send")
			tb.waitFor(fmt.Sprintf("%s: decision %d in the log", p.name, n), func(s pageState) bool { return len(s.Log) == n })
		}
		s := tb.waitFor(p.name+": count "+full+" and the ring counting down", func(s pageState) bool {
			return s.Count == full && s.RingMs != nil && *s.RingMs > 0
		})
		if s.Log[0].Status != "429" || s.Log[1].Status != "200" {
			t.Fatalf("%s: log %+v, want the 429 newest above a 200", p.name, s.Log)
		}
		v = evaluate[algoView](tb, algoViewJS)
		// The canvas is blank from a resize until the next frame draws it: on
		// a busy machine that frame may not have run yet.
		for deadline := time.Now().Add(waitTimeout); p.algorithm != "log" && v.Shown && !v.Painted && time.Now().Before(deadline); time.Sleep(pollEvery) {
			v = evaluate[algoView](tb, algoViewJS)
		}
		if p.algorithm == "log" {
			if v.Shown || len(s.IDs) != limit {
				t.Fatalf("%s: state canvas shown %v, %d timeline entries; want the log's %d entries", p.name, v.Shown, len(s.IDs), limit)
			}
			continue
		}
		if !v.Shown || !v.Painted || v.TimelineCount != fmt.Sprint(limit) || v.Caption == "" || len(s.IDs) != 0 {
			t.Fatalf("%s: the timeline does not show the state: %+v, %d entries", p.name, v, len(s.IDs))
		}
		// The words under the drawing say what it shows: a full window.
		fullWords := map[string]string{"fixed": "3 counted", "counter": "3 used of 3", "gcra": "0 of the burst of 3 fit now", "bucket": "0.00 tokens"}[p.algorithm]
		for deadline := time.Now().Add(waitTimeout); !strings.Contains(v.Caption, fullWords); time.Sleep(pollEvery) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the caption reads %q on a full window; want it to say %q", p.name, v.Caption, fullWords)
			}
			v = evaluate[algoView](tb, algoViewJS)
		}
		// The full window's state in view (RATESCOPE_SCREENSHOT=1 keeps it for
		// the README's algorithm table).
		evaluate[bool](tb, `(() => { document.querySelector('[data-testid="timeline"]').scrollIntoView({block: 'center'}); return true; })()`)
		shotOf(t, tb, chromedp.CaptureScreenshot(), 1280, "algorithm-"+p.algorithm+".png")
	}
	// The state's view fits a phone: nothing scrolls sideways at 390 px.
	tb.run("emulate a 390×844 viewport", chromedp.EmulateViewport(390, 844))
	s := tb.waitFor("a 390 px viewport", func(s pageState) bool { return s.InnerW == 390 })
	if s.ScrollW > 390 {
		t.Errorf("at 390 px the %s page scrolls sideways: scrollWidth %d", policies[len(policies)-1].name, s.ScrollW)
	}
	// Resizing clears the canvas; the next frame draws it again.
	for deadline := time.Now().Add(waitTimeout); ; time.Sleep(pollEvery) {
		v := evaluate[algoView](tb, algoViewJS)
		if v.Shown && v.Painted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("at 390 px the state is not drawn: %+v", v)
		}
	}
	// Back to the log: its entries are drawn again, the state's canvas steps aside.
	tb.run("emulate a 1280×800 viewport", chromedp.EmulateViewport(1280, 800))
	pick(tb, "plog")
	tb.waitFor("the log's "+full+" entries again", func(s pageState) bool { return s.Count == full && len(s.IDs) == limit })
	if v := evaluate[algoView](tb, algoViewJS); v.Algorithm != "log" || v.Shown {
		t.Errorf("back on plog the page shows %+v", v)
	}
	tb.close()
}

// pick chooses a policy in the picker, as a visitor does.
func pick(tb *tab, policy string) {
	tb.t.Helper()
	evaluate[bool](tb, `(() => {
  const s = document.querySelector('[data-testid="policy"]');
  s.value = '`+policy+`';
  s.dispatchEvent(new Event('change'));
  return s.value === '`+policy+`';
})()`)
}
