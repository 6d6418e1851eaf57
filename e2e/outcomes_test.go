package e2e_test

// Outcomes on the page: a refund takes a request's entries off the timeline
// of every tab and the log says so, a settle adds or removes dots at the
// request's score, a lock shows its end and the ring counts it down, and the
// race panel runs peek-then-record against check-then-keep.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// call POSTs body as JSON to the server and decodes its answer.
func (e *env) call(t *testing.T, path string, body map[string]any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(e.app.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: %s, and its body: %v", path, resp.Status, err)
	}
	return resp.StatusCode, out
}

// check sends one check of cost on policy and returns its answer; want is
// the status it must get.
func (e *env) check(t *testing.T, policy string, cost, want int) map[string]any {
	t.Helper()
	code, out := e.call(t, "/api/v1/check", map[string]any{"key": e.key, "policy": policy, "cost": cost})
	if code != want {
		t.Fatalf("check %d on %s: %d %v, want %d", cost, policy, code, out, want)
	}
	return out
}

// outcomeView is what these tests read from the page.
type outcomeView struct {
	IDs   []string  `json:"ids"` // data-id of each timeline-entry
	Ms    []int64   `json:"ms"`  // data-ms of each
	Count string    `json:"count"`
	Rows  []kindRow `json:"rows"` // the log's rows, newest first
	Lock  *lockView `json:"lock"` // nil while no lock shows
	Ring  int64     `json:"ring"` // the ring's data-remaining-ms
	Clock int64     `json:"clock"`
}

type kindRow struct {
	Kind string `json:"kind"` // data-kind: "refund", "settle", or "" for a decision
	Text string `json:"text"`
}

type lockView struct {
	Until   int64  `json:"until"`
	Text    string `json:"text"`
	Visible bool   `json:"visible"`
}

const outcomeViewJS = `(() => {
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  const entries = Array.from(document.querySelectorAll('[data-testid="timeline"] [data-testid="timeline-entry"]'));
  const lock = q('lock');
  return {
    ids: entries.map((e) => e.getAttribute('data-id')),
    ms: entries.map((e) => Number(e.getAttribute('data-ms'))),
    count: q('count').textContent.trim(),
    rows: Array.from(document.querySelectorAll('[data-testid="log"] [data-testid="log-entry"]'), (e) => ({
      kind: e.getAttribute('data-kind') || '',
      text: e.textContent.replace(/\s+/g, ' ').trim(),
    })),
    lock: lock ? { until: Number(lock.getAttribute('data-until')), text: lock.textContent.replace(/\s+/g, ' ').trim(),
      visible: lock.getClientRects().length > 0 && getComputedStyle(lock).visibility !== 'hidden' } : null,
    ring: Math.round(Number(q('ring').getAttribute('data-remaining-ms'))),
    clock: Number(q('clock').textContent.trim()) || 0,
  };
})()`

// waitOutcome polls the page until check returns nil, and fails the test
// with check's last error and the last view when it does not in time.
func (tb *tab) waitOutcome(what string, check func(outcomeView) error) outcomeView {
	tb.t.Helper()
	return waitView(tb, waitTimeout, outcomeViewJS, what, check)
}

// newestOfKind is the newest log row of kind, or nil.
func (v outcomeView) newestOfKind(kind string) *kindRow {
	for i := range v.Rows {
		if v.Rows[i].Kind == kind {
			return &v.Rows[i]
		}
	}
	return nil
}

// TestRefundLeavesEveryTab: two tabs on one window; of three checks sent
// through the API, one is refunded through the API and one with the log's
// refund button — each time the entry leaves both tabs' timelines, the
// count drops and both logs show a refund row.
func TestRefundLeavesEveryTab(t *testing.T) {
	e := start(t, "--policy", "demo=5/60s") // nothing slides out meanwhile
	tab1 := openTab(t, browser(t), "tab 1")
	tab1.navigate(e.pageURL())
	tab2 := openTab(t, tab1.ctx, "tab 2")
	tab2.navigate(e.pageURL())
	tabs := []*tab{tab1, tab2}

	var ids []string
	for range 3 {
		ids = append(ids, e.check(t, "demo", 1, http.StatusOK)["id"].(string))
	}
	shows := func(want []string, count string) func(outcomeView) error {
		return func(v outcomeView) error {
			if !sameSet(v.IDs, want) {
				return fmt.Errorf("timeline-entry data-ids %v, want %v", v.IDs, want)
			}
			if v.Count != count {
				return fmt.Errorf("count reads %q, want %q", v.Count, count)
			}
			return nil
		}
	}
	for _, tb := range tabs {
		tb.waitOutcome("the three checks", shows(ids, "3 / 5"))
	}

	code, out := e.call(t, "/api/v1/refund", map[string]any{"key": e.key, "policy": "demo", "id": ids[1]})
	if code != http.StatusOK || out["refunded"] != float64(1) {
		t.Fatalf("refund: %d %v, want 200 with refunded 1", code, out)
	}
	left := []string{ids[0], ids[2]}
	for _, tb := range tabs {
		tb.waitOutcome("the refunded entry gone", func(v outcomeView) error {
			if err := shows(left, "2 / 5")(v); err != nil {
				return err
			}
			r := v.newestOfKind("refund")
			if r == nil || !strings.Contains(r.Text, "refund · 1 entry back") {
				return fmt.Errorf("no log-entry data-kind=refund saying \"refund · 1 entry back\"")
			}
			return nil
		})
	}

	// The log's own button, on the sandbox policy: anyone may refund there.
	tab1.run("click the refund button of the newest check",
		chromedp.Click(`[data-testid="log-refund"][data-refund="`+ids[2]+`"]`, chromedp.NodeVisible))
	for _, tb := range tabs {
		tb.waitOutcome("the entry refunded from the page gone", func(v outcomeView) error {
			if err := shows(ids[:1], "1 / 5")(v); err != nil {
				return err
			}
			n := 0
			for _, r := range v.Rows {
				if r.Kind == "refund" {
					n++
				}
			}
			if n != 2 {
				return fmt.Errorf("%d log-entry rows of kind refund, want 2", n)
			}
			return nil
		})
	}
	if got := memberIDs(e.members(t)); !slices.Equal(got, ids[:1]) {
		t.Errorf("the ZSET holds %v after both refunds, want %v", got, ids[:1])
	}
}

// TestSettleChangesTheDots: a check of cost 2 settled to 4 shows four dots
// at its score, settled to 1 one, and the log says what each settle did.
func TestSettleChangesTheDots(t *testing.T) {
	e := start(t, "--policy", "demo=5/60s")
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	ans := e.check(t, "demo", 2, http.StatusOK)
	id := ans["id"].(string)
	score := int64(ans["nowMs"].(float64))
	members := func(n int) []string {
		out := []string{id}
		for k := 1; k < n; k++ {
			out = append(out, id+":"+strconv.Itoa(k))
		}
		return out
	}
	dots := func(n int, count, says string) func(outcomeView) error {
		return func(v outcomeView) error {
			if !sameSet(v.IDs, members(n)) {
				return fmt.Errorf("timeline-entry data-ids %v, want %v", v.IDs, members(n))
			}
			for _, ms := range v.Ms {
				if ms != score {
					return fmt.Errorf("a timeline-entry at %d, want every one at the check's score %d", ms, score)
				}
			}
			if v.Count != count {
				return fmt.Errorf("count reads %q, want %q", v.Count, count)
			}
			if says == "" {
				return nil
			}
			if r := v.newestOfKind("settle"); r == nil || !strings.Contains(r.Text, says) {
				return fmt.Errorf("the newest log-entry data-kind=settle is %+v, want it to say %q", r, says)
			}
			return nil
		}
	}
	tb.waitOutcome("the check's two entries", dots(2, "2 / 5", ""))

	settle := func(cost int) {
		t.Helper()
		code, out := e.call(t, "/api/v1/settle", map[string]any{"key": e.key, "policy": "demo", "id": id, "cost": cost})
		if code != http.StatusOK || out["settled"] != float64(cost) {
			t.Fatalf("settle to %d: %d %v", cost, code, out)
		}
	}
	settle(4)
	tb.waitOutcome("four dots after a settle to more", dots(4, "4 / 5", "settle 2 → 4"))
	settle(1)
	tb.waitOutcome("one dot after a settle to fewer", dots(1, "1 / 5", "settle 4 → 1"))
}

// TestLockShowsAndCountsDown: on a policy that locks for 3 s, the check that
// is denied locks the key; the page shows the lock with its end, the ring
// counts it down, and the lock leaves the page at its end.
func TestLockShowsAndCountsDown(t *testing.T) {
	const lockMs = 3000
	e := start(t, "--policy", "lk=2/10s+lock=3s")
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.app.URL + "/?key=" + url.QueryEscape(e.key) + "&policy=lk")
	e.check(t, "lk", 1, http.StatusOK)
	e.check(t, "lk", 1, http.StatusOK)
	denied := e.check(t, "lk", 1, http.StatusTooManyRequests)
	if denied["locked"] != true {
		t.Fatalf("the denial %v does not say locked", denied)
	}
	until := int64(denied["nowMs"].(float64)) + lockMs

	first := tb.waitOutcome("the lock", func(v outcomeView) error {
		switch {
		case v.Lock == nil:
			return fmt.Errorf("no lock shows")
		case !v.Lock.Visible:
			return fmt.Errorf("the lock is not visible")
		case v.Lock.Until < until-100 || v.Lock.Until > until+100:
			return fmt.Errorf("lock data-until %d, want the denial's nowMs + %d ms = %d", v.Lock.Until, lockMs, until)
		case !strings.Contains(v.Lock.Text, "locked · level 1"):
			return fmt.Errorf("the lock reads %q, want it to say locked · level 1", v.Lock.Text)
		case v.Ring <= 0 || v.Ring > lockMs:
			return fmt.Errorf("ring data-remaining-ms %d, want the lock's remaining time in (0, %d]", v.Ring, lockMs)
		}
		return nil
	})
	tb.waitOutcome("the ring counting the lock down", func(v outcomeView) error {
		if v.Lock == nil {
			return fmt.Errorf("the lock left before the ring was seen counting down")
		}
		if v.Ring <= 0 || v.Ring >= first.Ring {
			return fmt.Errorf("ring data-remaining-ms %d, want below the %d seen first and above 0", v.Ring, first.Ring)
		}
		return nil
	})
	gone := tb.waitOutcome("the lock gone at its end", func(v outcomeView) error {
		if v.Lock != nil {
			return fmt.Errorf("the lock still shows")
		}
		return nil
	})
	if gone.Clock < first.Lock.Until {
		t.Errorf("the lock left at %d on the page's clock, before its end %d", gone.Clock, first.Lock.Until)
	}
}

// TestRaceForOutcomes presses the race's two outcome buttons: peek, then
// record lets more failing logins than the limit reach the handler; check,
// then keep exactly the limit.
func TestRaceForOutcomes(t *testing.T) {
	e := start(t)
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	waitText := func(what string, re *regexp.Regexp) []string {
		t.Helper()
		got := waitEval(tb, what, `document.querySelector('[data-testid="race-result"]').textContent.replace(/\s+/g, ' ').trim()`,
			func(s string) bool { return re.MatchString(s) })
		return re.FindStringSubmatch(got)
	}
	tb.click("race-peekrecord")
	m := waitText("peek, then record", regexp.MustCompile(`peekrecord: (\d+) of 200 reached the handler, limit 5 — overshoot (\d+)`))
	if n, _ := strconv.Atoi(m[1]); n <= 5 {
		t.Fatalf("peek, then record let %d through: no more than the limit (%q)", n, m[0])
	}
	tb.click("race-reserverefund")
	m = waitText("check, then keep", regexp.MustCompile(`reserverefund: 5 of 200 reached the handler, limit 5 — exact`))
	t.Logf("race-result: %q", m[0])
	tb.waitFor("timeline = ZSET after check, then keep", func(s pageState) bool {
		zs := e.members(t)
		return len(zs) == 5 && sameSet(s.IDs, memberIDs(zs))
	})
}
