package views_test

import (
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/ratescope/ratescope/views"
)

// TestWaitControl: beside the send button, "wait up to" offers 0, 2 s and
// 10 s as the check's wait — enabled on a log policy, disabled on another
// algorithm (only the log can book) — and the timeline has a now line that
// a booked entry is drawn right of.
func TestWaitControl(t *testing.T) {
	doc, _ := render(t, testPage())
	sel := byTestID(doc, "wait")
	if sel.Length() != 1 || goquery.NodeName(sel) != "select" {
		t.Fatalf("found %d wait controls (%s), want one <select>", sel.Length(), goquery.NodeName(sel))
	}
	var values []string
	sel.Find("option").Each(func(_ int, o *goquery.Selection) { values = append(values, o.AttrOr("value", "")) })
	if strings.Join(values, " ") != "0 2s 10s" {
		t.Errorf("wait offers %q, want 0 2s 10s", values)
	}
	if v, _ := sel.Find("option[selected]").Attr("value"); v != "0" {
		t.Errorf("wait preselects %q, want 0", v)
	}
	if _, off := sel.Attr("disabled"); off {
		t.Error("wait is disabled on a log policy")
	}
	if n := byTestID(doc, "timeline").Find(`[data-testid="now"]`).Length(); n != 1 {
		t.Errorf("timeline holds %d now lines, want 1", n)
	}
	if n := doc.Find("#axis-end").Length(); n != 1 {
		t.Errorf("%d axis ends for the booked slots' room, want 1", n)
	}

	p := testPage()
	p.Policies = append(p.Policies, views.Policy{Name: "api", Algorithm: "gcra", Rules: []views.Rule{{Limit: 100, WindowMs: 60_000, Label: "100 per 1m"}}})
	p.Policy = "api"
	doc, _ = render(t, p)
	if _, off := byTestID(doc, "wait").Attr("disabled"); !off {
		t.Error("wait is enabled on a gcra policy, which cannot book")
	}
}

// TestInflightPolicy: on a policy of requests in flight the send button
// takes a lease, the wait control is hidden, the count reads leases in
// flight, the key is the sorted set the leases live in, and the timeline
// holds the container the lease bars are drawn in.
func TestInflightPolicy(t *testing.T) {
	p := testPage()
	p.Policies = append(p.Policies, views.Policy{Name: "jobs", Algorithm: "inflight", Rules: []views.Rule{{Limit: 4, Label: "4 in flight"}}})
	p.Policy = "jobs"
	doc, _ := render(t, p)
	if got := strings.TrimSpace(byTestID(doc, "send").Text()); got != "Take a lease" {
		t.Errorf("send reads %q, want Take a lease", got)
	}
	if _, hidden := doc.Find("#wait-field").Attr("hidden"); !hidden {
		t.Error("the wait control shows on an inflight policy")
	}
	if got := doc.Find("#count-label").Text(); got != "In flight / limit" {
		t.Errorf("the count's label reads %q", got)
	}
	if got := doc.Find("#zset-key").Text(); got != "rate_limit:{demo}:jobs" {
		t.Errorf("the Redis key reads %q, want the sorted set", got)
	}
	if n := byTestID(doc, "timeline").Find(`[data-testid="leases"]`).Length(); n != 1 {
		t.Errorf("timeline holds %d lease containers, want 1", n)
	}
	if n := byTestID(doc, "lease").Length(); n != 0 {
		t.Errorf("server rendered %d lease bars, want 0: they come from the stream", n)
	}
	var opt string
	byTestID(doc, "policy").Find("option[selected]").Each(func(_ int, o *goquery.Selection) { opt = o.Text() })
	if opt != "jobs (inflight) · 4 in flight" {
		t.Errorf("the policy reads %q", opt)
	}
}
