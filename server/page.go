package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/static"
	"github.com/ratescope/ratescope/views"
)

// pageShell is what every page tells its scripts of this instance: the tick
// interval its clock interpolates between, and the instance that versions
// its assets' URLs.
type pageShell struct {
	tickMs   int64
	instance string
}

// render writes a page: HTML, never stored (it shows the state of now).
func render(c echo.Context, page templ.Component) error {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	h.Set("Cache-Control", "no-store")
	c.Response().WriteHeader(http.StatusOK)
	return page.Render(c.Request().Context(), c.Response())
}

// handlePage renders the visualizer for ?key=&policy= (default demo/demo),
// with the override in force for the key (resolve: rulesInForce.live).
func handlePage(store *configStore, resolve func(key string, p limiter.Policy) (limiter.Policy, *live.Override), shell pageShell) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := readParams(c, fieldKey, fieldPolicy)
		if err != nil {
			return err
		}
		if _, ok := p.values["key"]; !ok {
			p.values["key"] = "demo"
		}
		if _, ok := p.values["policy"]; !ok {
			p.values["policy"] = sandboxPolicy
		}
		set := store.load()
		key := p.key()
		pol := p.policy(set)
		if err := p.problem(); err != nil {
			return err
		}
		policies := make([]views.Policy, len(set.policies))
		for i, p := range set.policies {
			policies[i] = views.Policy{
				Name: p.Name, Algorithm: string(p.Policy.AlgorithmName()), Shadow: p.Shadow,
				Rules: viewRules(p.Rules), Timezone: p.Timezone,
			}
		}
		var override *views.Override
		if _, o := resolve(key, pol.Policy.Policy); o != nil {
			override = &views.Override{Label: o.Label, Rules: viewRules(o.Rules), Note: o.Note}
		}
		return render(c, views.IndexPage(views.Page{
			Key: key, Policy: pol.Name, Policies: policies, Override: override,
			TickMs: shell.tickMs, Instance: shell.instance, AssetVersion: shell.instance,
			Facts: pageFacts,
		}))
	}
}

// viewRules are rules as the page shows them.
func viewRules(rules []limiter.Rule) []views.Rule {
	out := make([]views.Rule, len(rules))
	for i, r := range rules {
		out[i] = views.Rule{Limit: r.Limit, WindowMs: r.WindowMs(), Label: ruleLabel(r), Period: string(r.Period)}
	}
	return out
}

// ruleLabel names a rule for people: "5 per 10s", "100000 per month",
// "4 in flight".
func ruleLabel(r limiter.Rule) string {
	if r.InFlight {
		return fmt.Sprintf("%d in flight", r.Limit)
	}
	if r.Period != "" {
		return fmt.Sprintf("%d per %s", r.Limit, r.Period)
	}
	return fmt.Sprintf("%d per %s", r.Limit, limiter.WindowString(r.Window))
}

// pageFacts are what every page and its scripts read of the server rather
// than keep a copy: the key alphabet, where windows live in Redis, the
// sandbox policy and the algorithms.
var pageFacts = func() views.Facts {
	f := views.Facts{
		// KeyAlphabet ends with "-", so its ranges and characters, joined,
		// are a character class.
		KeyChars:       strings.Join(strings.Fields(limiter.KeyAlphabet), ""),
		KeyAlphabet:    limiter.KeyAlphabet,
		KeyMax:         limiter.MaxKeyLen,
		KeyFormat:      redisdata.KeyFormat,
		StateKeyFormat: redisdata.StateKeyFormat,
		Sandbox:        sandboxPolicy,
	}
	for _, d := range limiter.Algorithms() {
		a := views.Algorithm{
			Name: string(d.Name), Title: d.Title, Caption: d.Caption, Tradeoff: d.Tradeoff, Entries: d.Entries,
		}
		for _, s := range d.Steps {
			a.Steps = append(a.Steps, views.Step{Name: s.Name, Commands: s.Commands, Text: s.Text})
		}
		f.Algorithms = append(f.Algorithms, a)
	}
	return f
}()

// handleStatic serves the embedded JS, CSS and icon. URLs the page links carry
// ?v=<instance>, so they may be cached for a day; modules imported by other
// modules carry none, so browsers revalidate them (a 304 while the build's
// ETag holds) and never mix two releases' modules.
func handleStatic() echo.HandlerFunc {
	files := http.StripPrefix("/static/", http.FileServer(http.FS(static.FS)))
	return func(c echo.Context) error {
		h := c.Response().Header()
		if c.QueryParam("v") != "" {
			h.Set("Cache-Control", "public, max-age=86400")
		} else {
			h.Set("Cache-Control", "no-cache")
			h.Set("ETag", static.ETag)
		}
		files.ServeHTTP(c.Response(), c.Request())
		return nil
	}
}
