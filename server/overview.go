package server

import (
	"net/http"
	"strings"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/server/overview"
	"github.com/ratescope/ratescope/views"
)

// overviewAPI is what the overview's routes use: the policies in force, who
// may see a policy's clients, and the counts across instances.
type overviewAPI struct {
	store *configStore
	auth  authorizer
	ov    *overview.Overview
}

// policy reads and checks ?policy= of an overview request (default the
// sandbox) and who may see it.
func (o overviewAPI) policy(c echo.Context) (string, error) {
	p, err := readParams(c, fieldPolicy)
	if err != nil {
		return "", err
	}
	if _, ok := p.values["policy"]; !ok {
		p.values["policy"] = sandboxPolicy
	}
	pol := p.policy(o.store.load())
	if err := p.problem(); err != nil {
		return "", err
	}
	if err := o.auth.authorizeOverview(c, pol.Name); err != nil {
		return "", err
	}
	return pol.Name, nil
}

// handleOverview answers GET /api/v1/overview?policy=: every policy's rates
// and the policy's top clients, across instances.
func handleOverview(o overviewAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		policy, err := o.policy(c)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusOK, o.ov.State(c.Request().Context(), policy))
	}
}

// handleOverviewWS checks an overview stream request — GET
// /ws/overview?policy= — and streams the overview once a second. While it is
// open, the other instances send this one their counts.
func handleOverviewWS(o overviewAPI, s streams) echo.HandlerFunc {
	return func(c echo.Context) error {
		policy, err := o.policy(c)
		if err != nil {
			return err
		}
		return s.accept(c, func(conn *websocket.Conn) {
			o.ov.Watch(policy)
			s.live.ServeOverview(conn, policy, func() []byte { return o.ov.Message(policy) })
		})
	}
}

// handleOverviewPage renders the traffic overview for ?policy= (default the
// sandbox), as the overview answers now; its script follows /ws/overview.
func handleOverviewPage(o overviewAPI, shell pageShell) echo.HandlerFunc {
	return func(c echo.Context) error {
		policy, err := o.policy(c)
		if err != nil {
			return err
		}
		st := o.ov.State(c.Request().Context(), policy)
		page := views.OverviewPage{
			Policy: policy, Instances: st.Instances,
			TickMs: shell.tickMs, AssetVersion: shell.instance,
			Checks: overviewRows(st.Top.Checks), Denied: overviewRows(st.Top.Denied),
		}
		for _, p := range st.Policies {
			if p.Name == policy {
				page.Shadow = p.Shadow
			}
			page.Policies = append(page.Policies, views.OverviewPolicy{
				Name: p.Name, Rules: rulesLabel(o.store, p.Name), Shadow: p.Shadow,
				Allowed: p.Allowed, Denied: p.Denied, ShadowDenied: p.ShadowDenied, Cached: p.Cached,
			})
		}
		return render(c, views.Overview(page))
	}
}

func overviewRows(rows []overview.Row) []views.OverviewRow {
	out := make([]views.OverviewRow, len(rows))
	for i, r := range rows {
		out[i] = views.OverviewRow{Key: r.Key, Checks: r.Checks, Denied: r.Denied, Override: r.Override}
	}
	return out
}

// rulesLabel names a policy's rules for people, e.g. "5 per 10s, 100 per 1m".
func rulesLabel(s *configStore, name string) string {
	p, ok := s.lookup(name)
	if !ok {
		return ""
	}
	labels := make([]string, len(p.Rules))
	for i, r := range p.Rules {
		labels[i] = ruleLabel(r)
	}
	return strings.Join(labels, ", ")
}
