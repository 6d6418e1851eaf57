package server

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
)

// windowAPI is what the routes of one window use — reading it, resetting
// it, streaming it: the policies in force, who may do what, the limiter,
// the bound on its Redis calls, and which rules decide a key
// (Checker.PolicyFor: an override's when one applies).
type windowAPI struct {
	store   *configStore
	auth    authorizer
	lim     *limiter.Limiter
	redis   redisCalls
	resolve func(key string, p *httplimit.Policy) *httplimit.Policy
}

// params reads and checks key and policy of a window request, and whether
// the caller may read it (or, admin, reset it).
func (w windowAPI) params(c echo.Context, admin bool) (string, *httplimit.Policy, error) {
	p, err := readParams(c, fieldKey, fieldPolicy)
	if err != nil {
		return "", nil, err
	}
	key := p.key()
	pol := p.policy(w.store.load())
	if err := p.problem(); err != nil {
		return "", nil, err
	}
	if err := w.auth.authorize(c, pol.Name, admin); err != nil {
		return "", nil, err
	}
	return key, pol.Policy, nil
}

// inForce is the policy that decides key's checks under p: an override's
// rules (named by its Override) when one applies, else p.
func (w windowAPI) inForce(key string, p *httplimit.Policy) *httplimit.Policy {
	if w.resolve == nil {
		return p
	}
	return w.resolve(key, p)
}

// handleWindow answers GET /api/v1/window: the current window, consuming
// nothing, counted under the rules that decide the key's checks — an
// override's, which the answer names, when one applies.
func handleWindow(w windowAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, base, err := w.params(c, false)
		if err != nil {
			return err
		}
		pol := w.inForce(key, base)
		var win limiter.Window
		if err := w.redis.do(c, "window", "failed to read the window from Redis", func(ctx context.Context) (err error) {
			win, err = w.lim.Window(ctx, key, pol.Policy)
			return err
		}); err != nil {
			return err
		}
		st := live.NewWindowState(win) // the snapshot message without its type
		st.Override = pol.Override()
		return c.JSON(http.StatusOK, st)
	}
}

// handleReset answers DELETE /api/v1/window: the client starts afresh, and
// its viewers see it. Under an override the counters of its calendar
// quotas go too: they are named for the override's rules, not the
// policy's.
func handleReset(w windowAPI, view *live.View, log *slog.Logger) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, base, err := w.params(c, true)
		if err != nil {
			return err
		}
		pol := w.inForce(key, base)
		if err := w.redis.do(c, "reset", "failed to reset the window in Redis", func(ctx context.Context) error {
			if err := w.lim.Reset(ctx, key, base.Policy); err != nil || pol == base {
				return err
			}
			return w.lim.Reset(ctx, key, pol.Policy)
		}); err != nil {
			return err
		}
		log.Info("window reset", "key", key, "policy", base.Name)
		view.Reset(key, base.Name)
		return c.NoContent(http.StatusNoContent)
	}
}
