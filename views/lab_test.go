package views_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"github.com/ratescope/ratescope/views"
)

// TestLabPage: the lab carries SPEC §8's testids, preselects its rule and
// traffic, links back to the main page, and the main page links to it.
func TestLabPage(t *testing.T) {
	var buf bytes.Buffer
	p := views.LabPage{Lab: "class-7", Limit: 7, WindowS: 30, Traffic: "random", NameMax: 64,
		Facts: testFacts(), TickMs: 100, Instance: "i1", AssetVersion: "v1"}
	if err := views.Lab(p).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"lab": "main", "lab-limit": "input", "lab-window": "input", "lab-traffic": "select", "lab-run": "button"}
	for _, a := range []string{"log", "fixed", "counter", "gcra", "bucket"} {
		want["lab-lane-"+a] = ""
		want["lab-count-"+a] = ""
		want["lab-max-"+a] = ""
	}
	for id, tag := range want {
		s := byTestID(doc, id)
		if s.Length() != 1 {
			t.Errorf("%d elements with testid %q, want 1", s.Length(), id)
			continue
		}
		if tag != "" && goquery.NodeName(s) != tag {
			t.Errorf("testid %q is a <%s>, want <%s>", id, goquery.NodeName(s), tag)
		}
	}
	if v, _ := byTestID(doc, "lab-limit").Attr("value"); v != "7" {
		t.Errorf("lab-limit = %q, want 7", v)
	}
	if v, _ := byTestID(doc, "lab-window").Attr("value"); v != "30" {
		t.Errorf("lab-window = %q, want 30", v)
	}
	if v, _ := byTestID(doc, "lab").Attr("data-lab"); v != "class-7" {
		t.Errorf("data-lab = %q, want class-7", v)
	}
	if v := byTestID(doc, "lab-traffic").Find("option[selected]").AttrOr("value", ""); v != "random" {
		t.Errorf("selected traffic %q, want random", v)
	}
	var opts []string
	byTestID(doc, "lab-traffic").Find("option").Each(func(_ int, s *goquery.Selection) { opts = append(opts, s.AttrOr("value", "")) })
	if strings.Join(opts, ",") != "boundary,burst,steady,random" {
		t.Errorf("traffic options %v", opts)
	}
	if doc.Find(`a[href="/"]`).Length() == 0 {
		t.Error("the lab has no link back to /")
	}
	if doc.Find(`.lab-caption`).Length() != len(p.Facts.Algorithms) {
		t.Error("not one caption per algorithm")
	}
	idx, _ := render(t, testPage())
	if idx.Find(`a[href="/lab"]`).Length() == 0 {
		t.Error("the main page has no link to /lab")
	}
}
