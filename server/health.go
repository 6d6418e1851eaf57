package server

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/readiness"
)

// handleHealthz says the process is up.
func handleHealthz() echo.HandlerFunc {
	return func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	}
}

// handleReadyz says whether a check would be decided: in fail-closed mode
// that needs a Redis that accepts the limiter's writes, as readiness last
// found it (no Redis call per request); in fail-open mode every check gets an
// answer anyway. Either way the body names Redis's state: "up", or the error
// that keeps it from deciding ("readonly", "oom", "down").
func handleReadyz(ready *readiness.Monitor, failMode httplimit.FailMode) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), readiness.ProbeTimeout)
		defer cancel()
		st := ready.Wait(ctx)
		if !st.Ready() && failMode == httplimit.FailClosed {
			p := unavailable("Redis does not accept the limiter's writes (" + st.Redis + ") and the fail mode is closed")
			return writeProblem(c, p.Status, struct {
				*problem
				Redis string `json:"redis"`
			}{p, st.Redis}, p.header)
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready", "redis": st.Redis, "failMode": string(failMode)})
	}
}
