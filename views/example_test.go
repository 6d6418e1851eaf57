package views_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/PuerkitoBio/goquery"

	"github.com/ratescope/ratescope/views"
)

// The server fills a Page with plain values — the window to show, the
// policies it may pick — and renders it; the page's script takes over from
// there.
func ExampleIndexPage() {
	page := views.Page{
		Key:    "alice",
		Policy: "login",
		Policies: []views.Policy{
			{Name: "login", Algorithm: "log", Rules: []views.Rule{{Limit: 5, WindowMs: 60_000, Label: "5 per 1m"}}},
		},
		TickMs: 100,
	}
	var html bytes.Buffer
	if err := views.IndexPage(page).Render(context.Background(), &html); err != nil {
		panic(err)
	}
	doc, err := goquery.NewDocumentFromReader(&html)
	if err != nil {
		panic(err)
	}
	key, _ := doc.Find(`[data-testid="key"]`).Attr("value")
	fmt.Println(key)
	fmt.Println(strings.TrimSpace(doc.Find(`[data-testid="count"]`).Text()))
	fmt.Println(strings.TrimSpace(doc.Find(`[data-testid="algorithm"]`).Text()))
	// Output:
	// alice
	// – / 5
	// log
}
