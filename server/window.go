package server

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live"
)

// windowAPI is what the routes of one window use — reading it, resetting
// it, streaming it: the policies in force, who may do what, the limiter and
// the bound on its Redis calls.
type windowAPI struct {
	store *configStore
	auth  authorizer
	lim   *limiter.Limiter
	redis redisCalls
}

// params reads and checks key and policy of a window request, and whether
// the caller may read it (or, admin, reset it).
func (w windowAPI) params(c echo.Context, admin bool) (string, limiter.Policy, error) {
	p, err := readParams(c, fieldKey, fieldPolicy)
	if err != nil {
		return "", limiter.Policy{}, err
	}
	key := p.key()
	pol := p.policy(w.store.load())
	if err := p.problem(); err != nil {
		return "", limiter.Policy{}, err
	}
	if err := w.auth.authorize(c, pol.Name, admin); err != nil {
		return "", limiter.Policy{}, err
	}
	return key, pol.Policy.Policy, nil
}

// handleWindow answers GET /api/v1/window: the current window, consuming nothing.
func handleWindow(w windowAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, pol, err := w.params(c, false)
		if err != nil {
			return err
		}
		var win limiter.Window
		if err := w.redis.do(c, "window", "failed to read the window from Redis", func(ctx context.Context) (err error) {
			win, err = w.lim.Window(ctx, key, pol)
			return err
		}); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, live.NewWindowState(win)) // the snapshot message without its type
	}
}

// handleReset answers DELETE /api/v1/window: the client starts afresh, and
// its viewers see it.
func handleReset(w windowAPI, view *live.View, log *slog.Logger) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, pol, err := w.params(c, true)
		if err != nil {
			return err
		}
		if err := w.redis.do(c, "reset", "failed to reset the window in Redis", func(ctx context.Context) error {
			return w.lim.Reset(ctx, key, pol)
		}); err != nil {
			return err
		}
		log.Info("window reset", "key", key, "policy", pol.Name)
		view.Reset(key, pol.Name)
		return c.NoContent(http.StatusNoContent)
	}
}
