package views_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/ratescope/ratescope/views"
)

// planPage shows acme:eu under the policy plan: 10 a second, 3 a month in
// Berlin.
func planPage(o *views.Override) views.Page {
	p := testPage()
	p.Key, p.Policy = "acme:eu", "plan"
	p.Policies = append(p.Policies, views.Policy{Name: "plan", Timezone: "Europe/Berlin", Rules: []views.Rule{
		{Limit: 10, WindowMs: 1000, Label: "10 per 1s"},
		{Limit: 3, Label: "3 per month", Period: "month"},
	}})
	p.Override = o
	return p
}

var enterprise = &views.Override{Label: "prefix:acme:", Note: "enterprise plan", Rules: []views.Rule{
	{Limit: 1000, WindowMs: 60_000, Label: "1000 per 1m"},
	{Limit: 20000, WindowMs: 86_400_000, Label: "20000 per 24h"},
	{Limit: 50, Label: "50 per day", Period: "day"},
	{Limit: 900, Label: "900 per month", Period: "month"},
}}

// TestOverrideShownBesidePolicy: the override in force for the key shows
// beside the policy — who it is for, its rules and its note — with its
// label in data-override; without one the element is there, hidden and
// empty, for the script to fill when one comes.
func TestOverrideShownBesidePolicy(t *testing.T) {
	doc, _ := render(t, planPage(enterprise))
	o := byTestID(doc, "override")
	if o.Length() != 1 || o.Closest("#window-card").Length() != 1 {
		t.Fatalf("found %d override elements in the window card, want 1", o.Length())
	}
	if got, _ := o.Attr("data-override"); got != "prefix:acme:" {
		t.Errorf("data-override = %q", got)
	}
	if _, hidden := o.Attr("hidden"); hidden {
		t.Error("the override is hidden")
	}
	if got, want := strings.TrimSpace(o.Text()), "override for prefix acme: — 1000 per 1m, 20000 per 24h, 50 per day, 900 per month — enterprise plan"; got != want {
		t.Errorf("override reads %q, want %q", got, want)
	}
	if got := strings.TrimSpace(doc.Find("#rules-label").Text()); got != "10 per 1s, 3 per month" {
		t.Errorf("the policy's rules read %q beside it", got)
	}

	own := &views.Override{Label: "key", Rules: []views.Rule{{Limit: 5, WindowMs: 60_000, Label: "5 per 1m"}}}
	doc, _ = render(t, planPage(own))
	if got := strings.TrimSpace(byTestID(doc, "override").Text()); got != "override for this key — 5 per 1m" {
		t.Errorf("a key's own override without a note reads %q", got)
	}

	doc, _ = render(t, planPage(nil))
	o = byTestID(doc, "override")
	_, hidden := o.Attr("hidden")
	_, labelled := o.Attr("data-override")
	if o.Length() != 1 || !hidden || labelled || strings.TrimSpace(o.Text()) != "" {
		t.Errorf("without an override: %d elements, hidden %v, data-override %v, text %q", o.Length(), hidden, labelled, o.Text())
	}
}

// TestQuotaBars: each calendar quota in force is a bar with its period and
// limit — the override's when one applies — and no count until the stream
// reports one; a policy without quotas has none, and their place is hidden.
func TestQuotaBars(t *testing.T) {
	bars := func(doc *goquery.Document) (out []string) {
		byTestID(doc, "quota").Each(func(_ int, s *goquery.Selection) {
			period, _ := s.Attr("data-period")
			limit, _ := s.Attr("data-limit")
			_, counted := s.Attr("data-count")
			out = append(out, period+" "+limit+" "+strings.Join(strings.Fields(s.Find(".quota-head").Text()), " "))
			if counted || s.Find(".quota-fill").Length() != 1 || s.Find(".quota-reset").Length() != 1 {
				t.Errorf("quota %s: data-count before any data %v, or no fill or reset", period, counted)
			}
		})
		return out
	}
	doc, _ := render(t, planPage(nil))
	if got := strings.Join(bars(doc), "; "); got != "month 3 this month – / 3" {
		t.Errorf("the policy's quotas: %q", got)
	}
	doc, _ = render(t, planPage(enterprise))
	if got := strings.Join(bars(doc), "; "); got != "day 50 today – / 50; month 900 this month – / 900" {
		t.Errorf("the override's quotas: %q", got)
	}
	if got := strings.TrimSpace(byTestID(doc, "count").Text()); got != "– / 50" {
		t.Errorf("count under the override reads %q, want its smallest limit", got)
	}
	doc, _ = render(t, testPage())
	if n := byTestID(doc, "quota").Length(); n != 0 {
		t.Errorf("%d quota bars for a policy without quotas", n)
	}
	if _, hidden := doc.Find("#quotas").Attr("hidden"); !hidden {
		t.Error("the quotas' place shows for a policy without quotas")
	}
}

// TestOverviewMarksOverrides: a top client with an override carries its
// label in data-override and a visible mark; one under its policy's rules
// neither.
func TestOverviewMarksOverrides(t *testing.T) {
	var buf bytes.Buffer
	page := views.OverviewPage{Policy: "api", Instances: 1, Checks: []views.OverviewRow{
		{Key: "acme:eu", Checks: 40, Denied: 2, Override: "prefix:acme:"},
		{Key: "solo", Checks: 30, Override: "key"},
		{Key: "free:u1", Checks: 20},
	}}
	if err := views.Overview(page).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	doc, err := goquery.NewDocumentFromReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"acme:eu": "prefix:acme:", "solo": "key", "free:u1": ""}
	rows := byTestID(doc, "overview-top-checks").Find(`[data-testid="overview-key"]`)
	if rows.Length() != len(want) {
		t.Fatalf("%d rows, want %d", rows.Length(), len(want))
	}
	rows.Each(func(_ int, row *goquery.Selection) {
		key, _ := row.Attr("data-key")
		label, marked := row.Attr("data-override")
		mark := row.Find(".ov-override")
		_, hidden := mark.Attr("hidden")
		switch w := want[key]; {
		case w == "" && (marked || !hidden):
			t.Errorf("row %s without an override: data-override %q, mark hidden %v", key, label, hidden)
		case w != "" && (label != w || hidden || mark.Length() != 1):
			t.Errorf("row %s: data-override %q, want %q; %d marks, hidden %v", key, label, w, mark.Length(), hidden)
		}
	})
}
