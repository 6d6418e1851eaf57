package e2e_test

// Booked checks on the page: a check that waits for its slot has its entry
// scored in the future, drawn right of the now line until the clock reaches
// it; the log says how long it waited; the page's own "wait up to" books.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"testing"

	"github.com/chromedp/chromedp"
)

// bookedView is what these tests read of the timeline and the log.
type bookedView struct {
	Entries []bookedEntry `json:"entries"`
	NowX    float64       `json:"nowX"` // the now line's left edge, in CSS px
	Log     []string      `json:"log"`  // the log's rows, newest first
	Result  string        `json:"result"`
	Clock   int64         `json:"clock"`
}

type bookedEntry struct {
	ID     string  `json:"id"`
	Ms     int64   `json:"ms"`
	Future string  `json:"future"` // data-future
	X      float64 `json:"x"`      // the entry's centre, in CSS px
}

const bookedViewJS = `(() => {
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  return {
    entries: Array.from(document.querySelectorAll('[data-testid="timeline"] [data-testid="timeline-entry"]'), (e) => {
      const r = e.getBoundingClientRect();
      return { id: e.getAttribute('data-id'), ms: Number(e.getAttribute('data-ms')), future: e.getAttribute('data-future') || '', x: r.left + r.width / 2 };
    }),
    nowX: q('now').getBoundingClientRect().left,
    log: Array.from(document.querySelectorAll('[data-testid="log"] [data-testid="log-entry"]'), (e) => e.textContent.replace(/\s+/g, ' ').trim()),
    result: document.getElementById('send-result').textContent,
    clock: Number(q('clock').textContent.trim()) || 0,
  };
})()`

// waitBooked polls the page until check returns nil.
func (tb *tab) waitBooked(what string, check func(bookedView) error) bookedView {
	tb.t.Helper()
	return waitView(tb, waitTimeout, bookedViewJS, what, check)
}

// future is the one entry the page draws as booked, or an error.
func (v bookedView) future() (bookedEntry, error) {
	var out []bookedEntry
	for _, e := range v.Entries {
		if e.Future == "true" {
			out = append(out, e)
		}
	}
	if len(out) != 1 {
		return bookedEntry{}, fmt.Errorf("%d timeline-entry elements with data-future=\"true\", want 1", len(out))
	}
	e := out[0]
	if e.X <= v.NowX {
		return e, fmt.Errorf("the booked entry is drawn at x=%.1f, not right of the now line at x=%.1f", e.X, v.NowX)
	}
	return e, nil
}

var waitedRE = regexp.MustCompile(`waited ([0-9,]+) ms`)

// waitedRow is the log's newest row saying "waited … ms", or an error.
func (v bookedView) waitedRow() (string, error) {
	for _, r := range v.Log {
		if waitedRE.MatchString(r) {
			return r, nil
		}
	}
	return "", fmt.Errorf("no log-entry says \"waited … ms\"")
}

// TestBookedEntryRightOfNow: on a full 5/10s window, a check that may wait
// 30 s books the moment the oldest entry leaves. The page draws its entry
// right of the now line, marked data-future, the log says how long it
// waits; when the clock reaches the slot the entry is an ordinary one in
// the window, and the answer comes, at that entry's score.
func TestBookedEntryRightOfNow(t *testing.T) {
	e := start(t, "--policy", "demo=5/10s")
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	for range 5 {
		e.check(t, "demo", 1, http.StatusOK)
	}
	type answer struct {
		code int
		body map[string]any
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.Post(e.app.URL+"/api/v1/check", "application/json",
			bytes.NewReader([]byte(`{"key":"`+e.key+`","policy":"demo","wait":"30s"}`)))
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var body map[string]any
		err = json.NewDecoder(resp.Body).Decode(&body)
		done <- answer{code: resp.StatusCode, body: body, err: err}
	}()

	first := tb.waitBooked("a booked entry right of now", func(v bookedView) error {
		b, err := v.future()
		if err != nil {
			return err
		}
		if b.Ms <= v.Clock {
			return fmt.Errorf("the booked entry's data-ms %d is not after the clock %d", b.Ms, v.Clock)
		}
		_, err = v.waitedRow()
		return err
	})
	booked, _ := first.future()
	row, _ := first.waitedRow()
	t.Logf("booked at %d (clock %d); the log reads %q", booked.Ms, first.Clock, row)

	slid := tb.waitBooked("the booked entry inside the window", func(v bookedView) error {
		for _, en := range v.Entries {
			if en.ID != booked.ID {
				continue
			}
			if en.Future != "false" {
				return fmt.Errorf("the entry still has data-future=%q", en.Future)
			}
			if en.X > v.NowX+1 {
				return fmt.Errorf("the entry is at x=%.1f, right of the now line at x=%.1f", en.X, v.NowX)
			}
			return nil
		}
		return fmt.Errorf("the booked entry %s is gone", booked.ID)
	})
	if slid.Clock < booked.Ms {
		t.Errorf("the entry left the future at %d on the page's clock, before its score %d", slid.Clock, booked.Ms)
	}

	a := <-done
	if a.err != nil || a.code != http.StatusOK {
		t.Fatalf("the waiting check: %d %v %v, want 200", a.code, a.body, a.err)
	}
	if a.body["id"] != booked.ID || int64(a.body["bookedMs"].(float64)) != booked.Ms {
		t.Errorf("the answer %v is not the entry the page drew (%s at %d)", a.body, booked.ID, booked.Ms)
	}
	if _, ok := a.body["waitedMs"]; !ok {
		t.Errorf("the answer %v has no waitedMs", a.body)
	}
}

// TestWaitControlBooks: "wait up to" beside the send button makes the
// page's own check wait: on a full window it books, its entry shows right of
// now, and the result says how long it waited once the answer comes.
func TestWaitControlBooks(t *testing.T) {
	e := start(t, "--policy", "demo=2/4s")
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	e.check(t, "demo", 1, http.StatusOK)
	e.check(t, "demo", 1, http.StatusOK)
	tb.run("wait up to 10 s", chromedp.SetValue(byTestID("wait"), "10s"))
	tb.click("send")
	tb.waitBooked("the page's check booked", func(v bookedView) error {
		if _, err := v.future(); err != nil {
			return err
		}
		_, err := v.waitedRow()
		return err
	})
	v := tb.waitBooked("the answer after the wait", func(v bookedView) error {
		if !regexp.MustCompile(`^200 allowed after waiting [0-9,]+ ms`).MatchString(v.Result) {
			return fmt.Errorf("the result reads %q", v.Result)
		}
		return nil
	})
	t.Logf("the page's result: %q", v.Result)
}
