package server

import (
	"net/http"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/server/overview"
)

// overviewPolicy reads and checks ?policy= of an overview request (default
// the sandbox) and who may see it.
func overviewPolicy(c echo.Context, a *app) (string, error) {
	p, err := readParams(c, fieldPolicy)
	if err != nil {
		return "", err
	}
	if _, ok := p.values["policy"]; !ok {
		p.values["policy"] = sandboxPolicy
	}
	pol := p.policy(a.store.load())
	if err := p.problem(); err != nil {
		return "", err
	}
	if err := a.auth.authorizeOverview(c, pol.Name); err != nil {
		return "", err
	}
	return pol.Name, nil
}

// handleOverview answers GET /api/v1/overview?policy=: every policy's rates
// and the policy's top clients, across instances.
func handleOverview(a *app, ov *overview.Overview) echo.HandlerFunc {
	return func(c echo.Context) error {
		policy, err := overviewPolicy(c, a)
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(http.StatusOK, ov.State(c.Request().Context(), policy))
	}
}

// handleOverviewWS checks an overview stream request — GET
// /ws/overview?policy= — and streams the overview once a second. While it is
// open, the other instances send this one their counts.
func handleOverviewWS(a *app, l *live.View, ov *overview.Overview) echo.HandlerFunc {
	return func(c echo.Context) error {
		policy, err := overviewPolicy(c, a)
		if err != nil {
			return err
		}
		return accept(c, a, func(conn *websocket.Conn) {
			ov.Watch(policy)
			l.ServeOverview(conn, policy, func() []byte { return ov.Message(policy) })
		})
	}
}
