package e2e_test

// Tenants on the page: the override in force for the watched key shows
// beside the policy as it is set, changed and deleted on the server; each
// calendar quota is a bar with its count, limit and reset, moving with the
// checks; the overview marks the clients that have an override.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// overrideSeen bounds how long a change of an override may take to reach
// an open tab: the contract says about a second; a loaded machine gets a
// margin.
const overrideSeen = 5 * time.Second

// override calls the overrides API with the admin token "adm": method on
// policy's override of who ("key" or "prefix") value, body for a PUT, and
// wants want.
func (e *env) override(t *testing.T, method, policy, who, value, body string, want int) {
	t.Helper()
	u := e.app.URL + "/api/v1/overrides?" + url.Values{"policy": {policy}, who: {value}}.Encode()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer adm")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, u, resp.StatusCode, b, want)
	}
}

// checkKey sends one check of key on policy and wants want.
func (e *env) checkKey(t *testing.T, policy, key string, want int) map[string]any {
	t.Helper()
	code, out := e.call(t, "/api/v1/check", map[string]any{"key": key, "policy": policy})
	if code != want {
		t.Fatalf("check %s on %s: %d %v, want %d", key, policy, code, out, want)
	}
	return out
}

// tenantView is what these tests read from the page.
type tenantView struct {
	Override *overrideView `json:"override"`
	Quotas   []quotaView   `json:"quotas"`
	Count    string        `json:"count"`
	Clock    int64         `json:"clock"`
}

type overrideView struct {
	Label   string `json:"label"` // data-override
	Text    string `json:"text"`
	Visible bool   `json:"visible"`
}

type quotaView struct {
	Period  string `json:"period"`
	Count   string `json:"count"` // data-count, "" until known
	Limit   string `json:"limit"`
	ResetMs int64  `json:"resetMs"` // data-reset-ms
	Shown   string `json:"shown"`   // its count as the bar reads it: "2 / 50"
	Reset   string `json:"reset"`   // what its reset reads
	Full    bool   `json:"full"`
	Visible bool   `json:"visible"`
}

const tenantViewJS = `(() => {
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  const visible = (e) => !!e && e.getClientRects().length > 0;
  const text = (e) => e ? e.textContent.replace(/\s+/g, ' ').trim() : '';
  const o = q('override');
  return {
    override: o ? { label: o.getAttribute('data-override') || '', text: text(o), visible: visible(o) } : null,
    quotas: Array.from(document.querySelectorAll('[data-testid="quota"]'), (e) => ({
      period: e.getAttribute('data-period') || '', count: e.getAttribute('data-count') || '',
      limit: e.getAttribute('data-limit') || '', resetMs: Number(e.getAttribute('data-reset-ms')) || 0,
      shown: text(e.querySelector('.quota-count')), reset: text(e.querySelector('.quota-reset')), full: e.classList.contains('quota-full'), visible: visible(e),
    })),
    count: text(q('count')),
    clock: Number(text(q('clock'))) || 0,
  };
})()`

// waitTenant polls the page until check returns nil, for at most d, and
// fails the test with check's last error and the last view.
func (tb *tab) waitTenant(d time.Duration, what string, check func(tenantView) error) tenantView {
	tb.t.Helper()
	return waitView(tb, d, tenantViewJS, what, check)
}

// shows is a check that the override line reads text (visible), or is
// hidden when text is "".
func showsOverride(label, text string) func(tenantView) error {
	return func(v tenantView) error {
		switch o := v.Override; {
		case o == nil:
			return errors.New("no override element")
		case text == "" && (o.Visible || o.Label != ""):
			return fmt.Errorf("an override shows: %+v", *o)
		case text != "" && (!o.Visible || o.Text != text || o.Label != label):
			return fmt.Errorf("the override shows %+v, want %q labelled %q", *o, text, label)
		}
		return nil
	}
}

// TestPageShowsOverride: a tab watches a key while an override of its
// prefix is set on the server: within about a second the page shows it
// beside the policy — who it is for, its rules, its note — counts under its
// rules, and draws its day quota as a bar that moves with the checks; once
// the override is deleted it disappears, with its bar.
func TestPageShowsOverride(t *testing.T) {
	e := start(t, "--admin-token", "adm", "--policy", "plan=3/1m")
	tag := e.key + ":"
	key := tag + "eu"
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.app.URL + "/?" + url.Values{"key": {key}, "policy": {"plan"}}.Encode())
	tb.waitTenant(waitTimeout, "no override, no quota", func(v tenantView) error {
		if err := showsOverride("", "")(v); err != nil {
			return err
		}
		if len(v.Quotas) != 0 {
			return fmt.Errorf("quotas %+v", v.Quotas)
		}
		return nil
	})

	set := time.Now()
	e.override(t, "PUT", "plan", "prefix", tag, `{"rules":["5/1m","50/day"],"note":"enterprise plan"}`, http.StatusOK)
	want := "override for prefix " + tag + " — 5 per 1m, 50 per day — enterprise plan"
	tb.waitTenant(overrideSeen, "the override", showsOverride("prefix:"+tag, want))
	t.Logf("the override showed after %v", time.Since(set))
	for i := 1; i <= 2; i++ {
		e.checkKey(t, "plan", key, http.StatusOK)
		tb.waitTenant(waitTimeout, fmt.Sprintf("count and quota after check %d", i), func(v tenantView) error {
			if len(v.Quotas) != 1 {
				return fmt.Errorf("quotas %+v", v.Quotas)
			}
			if q := v.Quotas[0]; q.Period != "day" || q.Limit != "50" || q.Count != fmt.Sprint(i) || !q.Visible ||
				q.Shown != fmt.Sprintf("%d / 50", i) || !strings.HasPrefix(q.Reset, "resets ") || !strings.HasSuffix(v.Count, "/ 5") {
				return fmt.Errorf("count %q, quota %+v", v.Count, q)
			}
			return nil
		})
	}

	gone := time.Now()
	e.override(t, "DELETE", "plan", "prefix", tag, "", http.StatusNoContent)
	tb.waitTenant(overrideSeen, "the override gone, with its quota", func(v tenantView) error {
		if err := showsOverride("", "")(v); err != nil {
			return err
		}
		if len(v.Quotas) != 0 || !strings.HasSuffix(v.Count, "/ 3") {
			return fmt.Errorf("count %q, quotas %+v", v.Count, v.Quotas)
		}
		return nil
	})
	t.Logf("the override left the page after %v", time.Since(gone))
}

// resetText is what a quota's reset reads: the weekday (and, for a
// month, the date) and time of the period's end in the policy's zone, then
// how long until then.
var resetText = regexp.MustCompile(`^resets (Mon|Tue|Wed|Thu|Fri|Sat|Sun)( 1 [A-Z][a-z]{2})? 00:00 Europe/Berlin · in (\d+ d \d+ h|\d+ h \d+ min|\d+ min|\d+ s)$`)

// TestPageShowsQuotaBars: a policy with a day and a month quota in Berlin
// draws a bar for each, with its period and limit, its end — local
// midnight, the 1st for the month — and its count moving with every check;
// the day's bar is full at its limit, the next check's retry ends at that
// same instant, and a reset empties both.
func TestPageShowsQuotaBars(t *testing.T) {
	e := start(t, "--policy", "demo=100/1m,3/day,500/month+tz=Europe/Berlin")
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	tb := openTab(t, browser(t), "tab")
	tb.navigate(e.pageURL())
	bars := func(n int, also func(day, month quotaView) error) func(tenantView) error {
		return func(v tenantView) error {
			if len(v.Quotas) != 2 || v.Quotas[0].Period != "day" || v.Quotas[1].Period != "month" {
				return fmt.Errorf("quotas %+v", v.Quotas)
			}
			day, month := v.Quotas[0], v.Quotas[1]
			for _, q := range []quotaView{day, month} {
				if q.Count != fmt.Sprint(n) || q.Shown != fmt.Sprintf("%d / %s", n, q.Limit) || !q.Visible || !resetText.MatchString(q.Reset) {
					return fmt.Errorf("quota %+v, want count %d and its reset", q, n)
				}
			}
			if day.Limit != "3" || month.Limit != "500" || day.Full != (n >= 3) || month.Full {
				return fmt.Errorf("day %+v, month %+v", day, month)
			}
			if also != nil {
				return also(day, month)
			}
			return nil
		}
	}
	v := tb.waitTenant(waitTimeout, "two empty bars", bars(0, nil))
	day, month := v.Quotas[0], v.Quotas[1]
	now := time.UnixMilli(v.Clock)
	for _, q := range []quotaView{day, month} {
		end := time.UnixMilli(q.ResetMs).In(berlin)
		if end.Hour() != 0 || end.Minute() != 0 || end.Second() != 0 || !end.After(now) ||
			(q.Period == "day" && end.Sub(now) > 25*time.Hour) || (q.Period == "month" && (end.Day() != 1 || end.Sub(now) > 32*24*time.Hour)) {
			t.Errorf("the %s ends %v, %v from now", q.Period, end, end.Sub(now))
		}
	}
	// A date is a day and a month's name ("1 Jan"); "in 6 h 1 min" is none.
	date := regexp.MustCompile(`\b\d{1,2} [A-Z][a-z]{2}\b`)
	if !strings.Contains(month.Reset, " 1 ") || !date.MatchString(month.Reset) || date.MatchString(day.Reset) {
		t.Errorf("the day resets %q, the month %q: only the month names its date", day.Reset, month.Reset)
	}

	for i := 1; i <= 3; i++ {
		e.check(t, "demo", 1, http.StatusOK)
		tb.waitTenant(waitTimeout, fmt.Sprintf("the bars after check %d", i), bars(i, nil))
	}
	denied := e.check(t, "demo", 1, http.StatusTooManyRequests)
	if end := int64(denied["nowMs"].(float64) + denied["retryAfterMs"].(float64)); end != day.ResetMs {
		t.Errorf("the denial's retry ends at %d, the day's bar at %d", end, day.ResetMs)
	}
	tb.click("reset")
	tb.waitTenant(waitTimeout, "both bars empty after a reset", bars(0, nil))
}

// overviewMark is one top client as the overview shows it.
type overviewMark struct {
	Key      string `json:"key"`
	Override string `json:"override"` // data-override, "" when absent
	Marked   bool   `json:"marked"`   // its mark is visible
}

const overviewMarksJS = `Array.from(document.querySelectorAll('[data-testid="overview-top-checks"] [data-testid="overview-key"]'), (a) => {
  const mark = a.querySelector('.ov-override');
  return { key: a.getAttribute('data-key'), override: a.getAttribute('data-override') || '',
    marked: !!mark && mark.getClientRects().length > 0 };
})`

// TestOverviewMarksOverriddenKeys: the overview marks the top clients that
// have an override — a prefix's set before it opened, a key's set while it
// is open — and unmarks one whose override is deleted, without a reload.
func TestOverviewMarksOverriddenKeys(t *testing.T) {
	e := start(t, "--admin-token", "adm")
	tag := e.key + ":"
	byPrefix, own, plain := tag+"a", e.key+"-own", e.key+"-plain"
	e.override(t, "PUT", "demo", "prefix", tag, `{"rules":["9/10s"]}`, http.StatusOK)
	sendChecks(t, e.app.URL, "demo", byPrefix, 2)
	sendChecks(t, e.app.URL, "demo", own, 3)
	sendChecks(t, e.app.URL, "demo", plain, 4)
	tb := openTab(t, browser(t), "overview")
	tb.run("open the overview", chromedp.Navigate(e.app.URL+"/overview?policy=demo"))
	wait := func(what string, want map[string]string) {
		t.Helper()
		deadline := time.Now().Add(waitTimeout)
		for {
			rows := evaluate[[]overviewMark](tb, overviewMarksJS)
			ok := len(rows) == len(want)
			for _, r := range rows {
				w, listed := want[r.Key]
				ok = ok && listed && r.Override == w && r.Marked == (w != "")
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; rows %+v", what, waitTimeout, rows)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wait("the prefix's client marked", map[string]string{byPrefix: "prefix:" + tag, own: "", plain: ""})
	e.override(t, "PUT", "demo", "key", own, `{"rules":["7/10s"],"note":"vip"}`, http.StatusOK)
	wait("the key's own override marked too", map[string]string{byPrefix: "prefix:" + tag, own: "key", plain: ""})
	e.override(t, "DELETE", "demo", "prefix", tag, "", http.StatusNoContent)
	wait("the prefix's client unmarked", map[string]string{byPrefix: "", own: "key", plain: ""})
}
