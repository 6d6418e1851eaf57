package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// markedEntry is a log row with its marks, and the ring's mode.
type markedEntry struct {
	Text      string `json:"text"`
	Cached    bool   `json:"cached"`
	WouldDeny bool   `json:"wouldDeny"`
	Blocked   bool   `json:"blocked"` // the ring counts a Retry-After down
}

const markedJS = `(() => {
  const ring = document.getElementById('ring-wrap');
  return Array.from(document.querySelectorAll('[data-testid="log"] [data-testid="log-entry"]'), (e) => ({
    text: e.textContent.replace(/\s+/g, ' ').trim(),
    cached: e.getAttribute('data-cached') === 'true',
    wouldDeny: e.getAttribute('data-would-deny') === 'true',
    blocked: !!ring && ring.classList.contains('is-blocked'),
  }));
})()`

// waitMarked polls the log until its newest row satisfies ok.
func waitMarked(t *testing.T, tb *tab, what string, ok func(markedEntry) bool) markedEntry {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		rows := evaluate[[]markedEntry](tb, markedJS)
		if len(rows) > 0 && ok(rows[0]) {
			return rows[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; the log shows %+v", waitTimeout, what, rows)
		}
		time.Sleep(pollEvery)
	}
}

// check posts one check and returns its status and body.
func check(t *testing.T, base, policy, key string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(base+"/api/v1/check?policy="+policy+"&key="+url.QueryEscape(key), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("check: %d %q", resp.StatusCode, b)
	}
	return resp.StatusCode, body
}

// TestLogMarksShadowAndCached: the log marks a shadow policy's would-deny
// ("would deny · shadow", its ring not blocked) and a denial answered by the
// local deny cache ("cached", the ring counting its Retry-After down).
func TestLogMarksShadowAndCached(t *testing.T) {
	e := start(t, "--policy", "watched=2/1m+shadow", "--policy", "full=2/1m")
	tb := openTab(t, browser(t), "tab")

	tb.navigate(e.app.URL + "/?key=" + url.QueryEscape(e.key) + "&policy=watched")
	for i := 1; i <= 3; i++ {
		if status, body := check(t, e.app.URL, "watched", e.key); status != 200 || (i == 3) != (body["wouldDeny"] == true) {
			t.Fatalf("shadow check %d: %d %v", i, status, body)
		}
	}
	row := waitMarked(t, tb, "a would-deny row", func(r markedEntry) bool { return r.WouldDeny })
	if !strings.Contains(row.Text, "would deny · shadow") || !strings.Contains(row.Text, "200") || row.Cached || row.Blocked {
		t.Fatalf("would-deny row %+v; want it marked 'would deny · shadow', 200, and the ring not blocked", row)
	}

	tb.navigate(e.app.URL + "/?key=" + url.QueryEscape(e.key) + "&policy=full")
	for range 2 {
		if status, body := check(t, e.app.URL, "full", e.key); status != 200 {
			t.Fatalf("filling: %d %v", status, body)
		}
	}
	// The cache answers once its subscription to resets is up: deny until
	// one denial says cached.
	deadline := time.Now().Add(waitTimeout)
	for {
		status, body := check(t, e.app.URL, "full", e.key)
		if status != 429 {
			t.Fatalf("denial: %d %v", status, body)
		}
		if body["cached"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no denial came from the local deny cache")
		}
		time.Sleep(20 * time.Millisecond)
	}
	row = waitMarked(t, tb, "a cached row", func(r markedEntry) bool { return r.Cached })
	if !strings.Contains(row.Text, "429") || !strings.Contains(row.Text, "cached") || row.WouldDeny || !row.Blocked {
		t.Fatalf("cached row %+v; want 429 marked cached and the ring counting down", row)
	}
}
