package e2e_test

// Leases on the page: an inflight policy's live leases are bars from their
// start to their expiry, in every tab, added when taken, removed when given
// back or when their end passes; a tab opened later shows those held.

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// leaseBar is one `lease` element as the page shows it.
type leaseBar struct {
	ID      string `json:"id"`
	Start   int64  `json:"start"`
	Expires int64  `json:"expires"`
}

type leaseView struct {
	Bars    []leaseBar `json:"bars"`
	Count   string     `json:"count"`
	Caption string     `json:"caption"`
	Send    string     `json:"send"`
	Result  string     `json:"result"`
	Clock   int64      `json:"clock"`
}

const leaseViewJS = `(() => {
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  return {
    bars: Array.from(document.querySelectorAll('[data-testid="timeline"] [data-testid="lease"]'), (e) => ({
      id: e.getAttribute('data-lease-id'),
      start: Number(e.getAttribute('data-start-ms')),
      expires: Number(e.getAttribute('data-expires-ms')),
    })),
    count: q('count').textContent.trim(),
    caption: document.getElementById('tl-caption').textContent,
    send: q('send').textContent.trim(),
    result: document.getElementById('send-result').textContent,
    clock: Number(q('clock').textContent.trim()) || 0,
  };
})()`

// waitLeases polls the page until check returns nil.
func (tb *tab) waitLeases(what string, check func(leaseView) error) leaseView {
	tb.t.Helper()
	return waitView(tb, waitTimeout, leaseViewJS, what, check)
}

// lease is what an acquire answered.
type lease struct {
	ID      string
	Expires int64
	Now     int64
}

func (e *env) acquire(t *testing.T, policy string, want int) lease {
	t.Helper()
	code, out := e.call(t, "/api/v1/leases", map[string]any{"key": e.key, "policy": policy})
	if code != want {
		t.Fatalf("acquire on %s: %d %v, want %d", policy, code, out, want)
	}
	if code != http.StatusOK {
		return lease{}
	}
	id, _ := out["leaseId"].(string)
	return lease{ID: id, Expires: int64(out["expiresMs"].(float64)), Now: int64(out["nowMs"].(float64))}
}

// bars checks the page draws exactly the leases want, each from its start
// (the acquire's nowMs) to its expiry, and reads "in flight: n of limit".
func bars(want []lease, limit int) func(leaseView) error {
	return func(v leaseView) error {
		var ids []string
		for _, b := range v.Bars {
			ids = append(ids, b.ID)
		}
		var wantIDs []string
		for _, l := range want {
			wantIDs = append(wantIDs, l.ID)
		}
		if !sameSet(ids, wantIDs) {
			return fmt.Errorf("lease bars %v, want %v", ids, wantIDs)
		}
		for _, l := range want {
			i := slices.IndexFunc(v.Bars, func(b leaseBar) bool { return b.ID == l.ID })
			if b := v.Bars[i]; b.Start != l.Now || b.Expires != l.Expires {
				return fmt.Errorf("lease %s drawn from %d to %d, want from %d to %d", l.ID, b.Start, b.Expires, l.Now, l.Expires)
			}
		}
		if c := fmt.Sprintf("%d / %d", len(want), limit); v.Count != c {
			return fmt.Errorf("count reads %q, want %q", v.Count, c)
		}
		if c := fmt.Sprintf("in flight: %d of %d", len(want), limit); !strings.Contains(v.Caption, c) {
			return fmt.Errorf("the caption %q does not say %q", v.Caption, c)
		}
		return nil
	}
}

// TestLeasesDrawnAndRemoved: two leases taken over HTTP are two bars; one
// given back with its bar's release button leaves; the other leaves by
// itself when its lease time ends, told by nobody; and a tab opened while a
// lease is held shows it, and takes another with its own button.
func TestLeasesDrawnAndRemoved(t *testing.T) {
	e := start(t, "--policy", "jobs=2/inflight+lease=2s", "--policy", "long=3/inflight+lease=60s")
	tab1 := openTab(t, browser(t), "tab 1")
	tab1.navigate(e.app.URL + "/?key=" + url.QueryEscape(e.key) + "&policy=jobs")
	tab1.waitLeases("the in-flight readout", func(v leaseView) error {
		if v.Send != "Take a lease" {
			return fmt.Errorf("the send button reads %q on an inflight policy, want \"Take a lease\"", v.Send)
		}
		return bars(nil, 2)(v)
	})

	a := e.acquire(t, "jobs", http.StatusOK)
	b := e.acquire(t, "jobs", http.StatusOK)
	tab1.waitLeases("two lease bars", bars([]lease{a, b}, 2))
	e.acquire(t, "jobs", http.StatusTooManyRequests)

	// The bar moves a few hundred pixels a second on a 2 s lease: press its
	// button from the page, not at a screen position.
	if !evaluate[bool](tab1, `(() => { const b = document.querySelector('[data-testid="lease"][data-lease-id="`+a.ID+`"] [data-testid="lease-release"]');
  if (!b) return false; b.click(); return true; })()`) {
		t.Fatalf("no release button on the bar of lease %s", a.ID)
	}
	tab1.waitLeases("one bar after a release", bars([]lease{b}, 2))

	gone := tab1.waitLeases("the other bar gone at its end", bars(nil, 2))
	if gone.Clock < b.Expires {
		t.Errorf("the bar left at %d on the page's clock, before its lease's end %d", gone.Clock, b.Expires)
	}

	held := e.acquire(t, "long", http.StatusOK)
	tab2 := openTab(t, tab1.ctx, "tab 2")
	tab2.navigate(e.app.URL + "/?key=" + url.QueryEscape(e.key) + "&policy=long")
	tab2.waitLeases("the lease held before the tab opened", bars([]lease{held}, 3))
	tab2.click("send")
	v := tab2.waitLeases("a lease taken from the page", func(v leaseView) error {
		if len(v.Bars) != 2 {
			return fmt.Errorf("%d lease bars, want 2", len(v.Bars))
		}
		if !strings.Contains(v.Result, "200 lease") {
			return fmt.Errorf("the result reads %q, want a 200 lease", v.Result)
		}
		return nil
	})
	t.Logf("after taking a lease from the page: %q", v.Result)
}
