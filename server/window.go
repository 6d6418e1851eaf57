package server

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/server/readiness"
)

// windowParams reads and checks key and policy of a window request.
func windowParams(c echo.Context, a *app, admin bool) (string, limiter.Policy, error) {
	p, err := readParams(c, fieldKey, fieldPolicy)
	if err != nil {
		return "", limiter.Policy{}, err
	}
	key := p.key()
	pol := p.policy(a.store.load())
	if err := p.problem(); err != nil {
		return "", limiter.Policy{}, err
	}
	if err := a.authorize(c, pol.Name, admin); err != nil {
		return "", limiter.Policy{}, err
	}
	return key, pol.Policy.Policy, nil
}

// handleWindow answers GET /api/v1/window: the current window, consuming nothing.
func handleWindow(a *app) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, pol, err := windowParams(c, a, false)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.Request().Context(), a.cfg.CheckTimeout)
		defer cancel()
		w, err := a.lim.Window(ctx, key, pol)
		if err != nil {
			a.metrics.redisErrors.WithLabelValues("window").Inc()
			return unavailable("failed to read the window from Redis; try again shortly")
		}
		return c.JSON(http.StatusOK, live.NewWindowState(w)) // the snapshot message without its type
	}
}

// handleReset answers DELETE /api/v1/window: the client starts afresh.
func handleReset(a *app) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, pol, err := windowParams(c, a, true)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.Request().Context(), a.cfg.CheckTimeout)
		defer cancel()
		if err := a.lim.Reset(ctx, key, pol); err != nil {
			a.metrics.redisErrors.WithLabelValues("reset").Inc()
			return unavailable("failed to reset the window in Redis; try again shortly")
		}
		a.log.Info("window reset", "key", key, "policy", pol.Name)
		a.observeReset(key, pol)
		return c.NoContent(http.StatusNoContent)
	}
}

type policyJSON struct {
	Name      string            `json:"name"`
	Rules     []policyRuleJSON  `json:"rules"`
	Algorithm limiter.Algorithm `json:"algorithm"` // SPEC §8: one of limiter.Algorithms
	Shadow    bool              `json:"shadow"`    // SPEC §9
}

type policyRuleJSON struct {
	Limit    int   `json:"limit"`
	WindowMs int64 `json:"windowMs"`
}

// policiesJSON is the answer of GET /api/v1/policies: the policies in force,
// the version of the config they belong to and when it was loaded.
type policiesJSON struct {
	Policies []policyJSON `json:"policies"`
	Version  string       `json:"version"`
	LoadedAt int64        `json:"loadedAt"` // epoch milliseconds
}

// handlePolicies lists the policies in force: GET /api/v1/policies.
func handlePolicies(store *configStore) echo.HandlerFunc {
	return func(c echo.Context) error {
		set := store.load()
		out := policiesJSON{Version: set.version, LoadedAt: set.loadedAt.UnixMilli()}
		for _, p := range set.policies {
			pj := policyJSON{Name: p.Name, Algorithm: p.Policy.AlgorithmName(), Shadow: p.Shadow}
			for _, r := range p.Rules {
				pj.Rules = append(pj.Rules, policyRuleJSON{Limit: r.Limit, WindowMs: r.WindowMs()})
			}
			out.Policies = append(out.Policies, pj)
		}
		return c.JSON(http.StatusOK, out)
	}
}

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
func handleReadyz(a *app) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), readiness.ProbeTimeout)
		defer cancel()
		st := a.ready.Wait(ctx)
		if !st.Ready() && a.cfg.FailMode == httplimit.FailClosed {
			p := unavailable("Redis does not accept the limiter's writes (" + st.Redis + ") and the fail mode is closed")
			return writeProblem(c, p.Status, struct {
				*problem
				Redis string `json:"redis"`
			}{p, st.Redis}, p.header)
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready", "redis": st.Redis, "failMode": string(a.cfg.FailMode)})
	}
}
