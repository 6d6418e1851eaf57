package views_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/views"
)

func testPage() views.Page {
	return views.Page{
		Key:    "demo",
		Policy: "login",
		Policies: []views.Policy{
			{Name: "default", Rules: []views.Rule{{Limit: 10, WindowMs: 60_000, Label: "10 per 1m"}}},
			{Name: "demo", Rules: []views.Rule{{Limit: 5, WindowMs: 10_000, Label: "5 per 10s"}}},
			{Name: "login", Rules: []views.Rule{
				{Limit: 20, WindowMs: 3_600_000, Label: "20 per 1h"},
				{Limit: 5, WindowMs: 60_000, Label: "5 per 1m"},
			}},
		},
		TickMs:       100,
		Instance:     "inst-7f3a",
		AssetVersion: "abc123",
		Facts:        testFacts(),
	}
}

// testFacts are the facts the server gives the pages, from the limiter.
func testFacts() views.Facts {
	f := views.Facts{
		KeyChars: "A-Za-z0-9._:@/+=-", KeyAlphabet: limiter.KeyAlphabet, KeyMax: limiter.MaxKeyLen,
		KeyFormat: redisdata.KeyFormat, StateKeyFormat: redisdata.StateKeyFormat, Sandbox: "demo",
	}
	for _, d := range limiter.Algorithms() {
		f.Algorithms = append(f.Algorithms, views.Algorithm{
			Name: string(d.Name), Title: d.Title, Caption: d.Caption, Tradeoff: d.Tradeoff, Entries: d.Entries,
		})
	}
	return f
}

// caption is the named algorithm's caption.
func caption(name string) string {
	d, _ := limiter.Describe(limiter.Algorithm(name))
	return d.Caption
}

func render(t *testing.T, p views.Page) (*goquery.Document, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := views.IndexPage(p).Render(context.Background(), &buf); err != nil {
		t.Fatalf("failed to render: %v", err)
	}
	html := buf.String()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(html))
	if err != nil {
		t.Fatalf("failed to parse: %v", err)
	}
	return doc, html
}

func byTestID(doc *goquery.Document, id string) *goquery.Selection {
	return doc.Find(`[data-testid="` + id + `"]`)
}

func TestIndexPageHasEveryTestID(t *testing.T) {
	doc, _ := render(t, testPage())
	for _, tc := range []struct {
		id  string
		tag string
	}{
		{"clock", ""}, {"clock-utc", ""}, {"ring", "svg"}, {"timeline", ""}, {"count", ""},
		{"send", "button"}, {"boundary-test", "button"}, {"boundary-result", ""},
		{"reset", "button"}, {"log", ""}, {"race-naive", "button"},
		{"race-atomic", "button"}, {"race-peekrecord", "button"}, {"race-reserverefund", "button"},
		{"race-result", ""}, {"key", "input"},
		{"policy", "select"}, {"viewers", ""}, {"status", ""}, {"rate", ""},
		{"algorithm", ""},
	} {
		sel := byTestID(doc, tc.id)
		if sel.Length() != 1 {
			t.Errorf("testid %q: found %d elements, want 1", tc.id, sel.Length())
			continue
		}
		if tc.tag != "" && goquery.NodeName(sel) != tc.tag {
			t.Errorf("testid %q is a <%s>, want <%s>", tc.id, goquery.NodeName(sel), tc.tag)
		}
	}
	if n := byTestID(doc, "timeline").Find(`[data-testid="cutoff"]`).Length(); n != 1 {
		t.Errorf("timeline holds %d cutoff lines, want 1", n)
	}
	if _, ok := byTestID(doc, "ring").Attr("data-remaining-ms"); !ok {
		t.Error("ring lacks data-remaining-ms")
	}
	if got, _ := byTestID(doc, "timeline").Attr("data-count"); got != "0" {
		t.Errorf("timeline data-count = %q before any data, want 0", got)
	}
	if n := byTestID(doc, "timeline").Find("canvas.tl-canvas").Length(); n != 1 {
		t.Errorf("timeline holds %d canvases for busy windows, want 1", n)
	}
	if n := byTestID(doc, "timeline").Find("canvas.tl-algo").Length(); n != 1 {
		t.Errorf("timeline holds %d canvases for the other algorithms' state, want 1", n)
	}
	if n := byTestID(doc, "rate").Find("canvas").Length(); n != 1 {
		t.Errorf("rate holds %d canvases, want 1 for the sparkline", n)
	}
	if got := strings.TrimSpace(byTestID(doc, "rate").Text()); got != "0/s allowed · 0/s denied" {
		t.Errorf("rate reads %q before any data", got)
	}
	// Entries, log lines and a lock come from the stream only.
	for _, id := range []string{"timeline-entry", "log-entry", "lock"} {
		if n := byTestID(doc, id).Length(); n != 0 {
			t.Errorf("server rendered %d %q elements, want 0", n, id)
		}
	}
	if got := strings.TrimSpace(byTestID(doc, "status").Text()); got != "reconnecting" {
		t.Errorf("status = %q before the socket connects, want reconnecting", got)
	}
}

// TestRacePanel: the race offers its four modes — counting every request,
// then counting only failed logins — each button beside a sentence on why,
// and race-result holds a line per mode, in the buttons' order, for the
// script to fill.
func TestRacePanel(t *testing.T) {
	doc, _ := render(t, testPage())
	card := byTestID(doc, "race-result").Closest("section")
	var buttons []string
	card.Find("button[data-testid]").Each(func(_ int, b *goquery.Selection) {
		id, _ := b.Attr("data-testid")
		if typ, _ := b.Attr("type"); typ != "button" {
			t.Errorf("%s is a button of type %q, want button (no form submit)", id, typ)
		}
		if strings.TrimSpace(b.Text()) == "" {
			t.Errorf("%s has no text", id)
		}
		buttons = append(buttons, id)
	})
	if got, want := strings.Join(buttons, ","), "race-naive,race-atomic,race-peekrecord,race-reserverefund"; got != want {
		t.Errorf("race buttons %s, want %s", got, want)
	}
	var lines []string
	byTestID(doc, "race-result").Find(".race-line").Each(func(_ int, l *goquery.Selection) {
		lines = append(lines, l.AttrOr("data-mode", ""))
	})
	if got, want := strings.Join(lines, ","), "naive,atomic,peekrecord,reserverefund"; got != want {
		t.Errorf("race-result lines %s, want %s", got, want)
	}
	text := strings.Join(strings.Fields(card.Text()), " ")
	for _, why := range []string{
		"Peek, then record asks “any failures left?” without recording",
		"every one of them reaches the login",
		"Check, then keep records first, so each entry holds its room while the login runs",
		"exactly limit failing logins reach it",
	} {
		if !strings.Contains(text, why) {
			t.Errorf("the race panel does not say %q", why)
		}
	}
}

// TestLockSlot: the count readout has a place for the lock, empty until the
// stream says the key is locked, and read out when one appears.
func TestLockSlot(t *testing.T) {
	doc, _ := render(t, testPage())
	slot := doc.Find(".readout-count #lock-slot")
	if slot.Length() != 1 {
		t.Fatalf("found %d lock slots in the count readout, want 1", slot.Length())
	}
	if live, _ := slot.Attr("aria-live"); live != "polite" {
		t.Errorf("lock slot aria-live = %q, want polite", live)
	}
	if slot.Children().Length() != 0 {
		t.Errorf("the lock slot holds %d elements before any data", slot.Children().Length())
	}
}

func TestPolicySelectMarksSelected(t *testing.T) {
	doc, _ := render(t, testPage())
	opts := byTestID(doc, "policy").Find("option")
	var names, selected []string
	opts.Each(func(_ int, o *goquery.Selection) {
		v, _ := o.Attr("value")
		names = append(names, v)
		if _, ok := o.Attr("selected"); ok {
			selected = append(selected, v)
		}
	})
	if got, want := strings.Join(names, ","), "default,demo,login"; got != want {
		t.Errorf("options = %s, want %s", got, want)
	}
	if len(selected) != 1 || selected[0] != "login" {
		t.Errorf("selected = %v, want [login]", selected)
	}
	if txt := opts.Eq(2).Text(); !strings.Contains(txt, "20 per 1h, 5 per 1m") {
		t.Errorf("login option reads %q, want its rule labels", txt)
	}
}

// TestAlgorithmShown: the option of every policy names its algorithm, and
// the page names the preselected one's (with "shadow") and says what it is.
func TestAlgorithmShown(t *testing.T) {
	p := testPage()
	p.Policies = append(p.Policies,
		views.Policy{Name: "api", Algorithm: "gcra", Rules: []views.Rule{{Limit: 100, WindowMs: 60_000, Label: "100 per 1m"}}},
		views.Policy{Name: "burst", Algorithm: "bucket", Shadow: true, Rules: []views.Rule{{Limit: 10, WindowMs: 1_000, Label: "10 per 1s"}}},
	)
	doc, _ := render(t, p)
	var got []string
	byTestID(doc, "policy").Find("option").Each(func(_ int, o *goquery.Selection) { got = append(got, o.Text()) })
	want := []string{
		"default (log) · 10 per 1m", "demo (log) · 5 per 10s", "login (log) · 20 per 1h, 5 per 1m",
		"api (gcra) · 100 per 1m", "burst (bucket · shadow) · 10 per 1s",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("options read %q, want %q", got, want)
	}
	if a := strings.TrimSpace(byTestID(doc, "algorithm").Text()); a != "log" {
		t.Errorf("algorithm reads %q for login, want log", a)
	}
	for _, tc := range []struct{ policy, text, card string }{{"api", "gcra", "gcra"}, {"burst", "bucket · shadow", "bucket"}} {
		p.Policy = tc.policy
		doc, _ := render(t, p)
		if a := strings.TrimSpace(byTestID(doc, "algorithm").Text()); a != tc.text {
			t.Errorf("algorithm reads %q for %s, want %q", a, tc.policy, tc.text)
		}
		if k := doc.Find("#zset-key").Text(); k != "rate_limit:{demo}:"+tc.policy+":"+tc.card {
			t.Errorf("Redis key for %s reads %q", tc.policy, k)
		}
		if c, _ := doc.Find("#window-card").Attr("data-algorithm"); c != tc.card {
			t.Errorf("window card's data-algorithm = %q for %s, want %q", c, tc.policy, tc.card)
		}
		if c := doc.Find("#algo-caption").Text(); c != caption(tc.card) || c == "" {
			t.Errorf("caption for %s reads %q", tc.policy, c)
		}
	}
	var caps []views.Algorithm
	raw, _ := doc.Find("#app").Attr("data-algorithms")
	if err := json.Unmarshal([]byte(raw), &caps); err != nil || len(caps) != len(limiter.Algorithms()) || caps[len(caps)-1].Caption == "" {
		t.Errorf("data-algorithms = %q (%v), want a caption for each of the limiter's algorithms", raw, err)
	}
}

func TestKeyInputAndConfig(t *testing.T) {
	p := testPage()
	p.Key = `a"b<c>+d`
	doc, _ := render(t, p)
	key := byTestID(doc, "key")
	if v, _ := key.Attr("value"); v != p.Key {
		t.Errorf("key input value = %q, want %q", v, p.Key)
	}
	if name, _ := key.Attr("name"); name != "key" {
		t.Errorf("key input name = %q, want key (the form works without JS)", name)
	}
	app := doc.Find("main#app")
	for attr, want := range map[string]string{
		"data-key":      p.Key,
		"data-policy":   "login",
		"data-tick-ms":  "100",
		"data-instance": "inst-7f3a",
	} {
		if got, _ := app.Attr(attr); got != want {
			t.Errorf("%s = %q, want %q", attr, got, want)
		}
	}
	raw, _ := app.Attr("data-policies")
	var pols []views.Policy
	if err := json.Unmarshal([]byte(raw), &pols); err != nil {
		t.Fatalf("data-policies is not JSON: %v (%q)", err, raw)
	}
	if len(pols) != 3 || pols[2].Name != "login" || pols[2].Rules[1].WindowMs != 60_000 {
		t.Errorf("data-policies = %+v", pols)
	}
	if !strings.Contains(raw, `"windowMs":60000`) {
		t.Errorf("data-policies lacks the script's field names: %s", raw)
	}
	if got := byTestID(doc, "count").Text(); got != "– / 5" {
		t.Errorf("count before data = %q, want the smallest limit, %q", got, "– / 5")
	}
	if got := doc.Find("#zset-key").Text(); got != `rate_limit:{a"b<c>+d}:login` {
		t.Errorf("zset key caption = %q", got)
	}
	if !strings.Contains(doc.Find("footer").Text(), "inst-7f3a") {
		t.Error("footer does not name the instance")
	}
}

func TestNoInlineScriptOrStyle(t *testing.T) {
	p := testPage()
	p.Key = `"><script>alert(1)</script>`
	doc, html := render(t, p)
	scripts := doc.Find("script")
	if scripts.Length() != 1 {
		t.Errorf("found %d <script> elements, want 1", scripts.Length())
	}
	scripts.Each(func(_ int, s *goquery.Selection) {
		if strings.TrimSpace(s.Text()) != "" {
			t.Errorf("inline script content: %q", s.Text())
		}
		if _, ok := s.Attr("src"); !ok {
			t.Error("script without src")
		}
	})
	if n := doc.Find("style").Length(); n != 0 {
		t.Errorf("found %d <style> blocks", n)
	}
	if n := doc.Find("[style]").Length(); n != 0 {
		t.Errorf("found %d style= attributes", n)
	}
	doc.Find("*").Each(func(_ int, s *goquery.Selection) {
		for _, a := range s.Nodes[0].Attr {
			if strings.HasPrefix(strings.ToLower(a.Key), "on") {
				t.Errorf("<%s> has inline handler %s", goquery.NodeName(s), a.Key)
			}
		}
	})
	if strings.Contains(html, "<script>alert") {
		t.Error("key was not escaped")
	}
}

func TestStaticURLs(t *testing.T) {
	doc, html := render(t, testPage())
	if !strings.HasPrefix(html, "<!doctype html>") && !strings.HasPrefix(html, "<!DOCTYPE html>") {
		t.Errorf("document starts %q", html[:min(len(html), 20)])
	}
	if src, _ := doc.Find("script").Attr("src"); src != "/static/js/main.js?v=abc123" {
		t.Errorf("script src = %q", src)
	}
	if typ, _ := doc.Find("script").Attr("type"); typ != "module" {
		t.Errorf("script type = %q, want module (deferred, imports its parts)", typ)
	}
	if href, _ := doc.Find(`link[rel="stylesheet"]`).Attr("href"); href != "/static/app.css?v=abc123" {
		t.Errorf("stylesheet href = %q", href)
	}
	if href, _ := doc.Find(`link[rel="icon"]`).Attr("href"); href != "/static/favicon.svg?v=abc123" {
		t.Errorf("icon href = %q", href)
	}
	doc.Find("[src], link[href]").Each(func(_ int, s *goquery.Selection) {
		u := s.AttrOr("src", s.AttrOr("href", ""))
		if !strings.HasPrefix(u, "/static/") {
			t.Errorf("asset %q is not served by this app", u)
		}
	})
}

func TestStaticURLsWithoutVersion(t *testing.T) {
	p := testPage()
	p.AssetVersion = ""
	doc, _ := render(t, p)
	if src, _ := doc.Find("script").Attr("src"); src != "/static/js/main.js" {
		t.Errorf("script src = %q", src)
	}
}

func TestUnknownPolicyStillRenders(t *testing.T) {
	p := testPage()
	p.Policy = "nope"
	p.Policies = nil
	doc, _ := render(t, p)
	if n := byTestID(doc, "policy").Find("option").Length(); n != 0 {
		t.Errorf("%d options, want 0", n)
	}
	if got, _ := doc.Find("main#app").Attr("data-policies"); got != "[]" {
		t.Errorf("data-policies = %q, want []", got)
	}
}
