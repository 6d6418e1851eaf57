package server

import (
	"log/slog"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/server/overview"
	"github.com/ratescope/ratescope/server/readiness"
)

// app holds what the handlers share: configuration, the limiter and Redis,
// logging and metrics. Handlers get it through their maker functions.
type app struct {
	cfg      Config
	store    *configStore // policies, trusted proxies and routes in force
	lim      *limiter.Limiter
	checker  *httplimit.Checker // every entry point decides through it
	auth     authorizer
	rdb      redis.UniversalClient
	log      *slog.Logger
	metrics  *metrics
	instance string
	live     *live.View
	overview *overview.Overview // the traffic of every policy, across instances
	// labRecent keeps each lab's recent requests for the tabs that join.
	labRecent labRecent
	labs      labRegistry        // the cap on labs held in Redis (--max-labs)
	ready     *readiness.Monitor // whether Redis accepts writes: /readyz, gRPC health
	races     races
	viewers   *slots[string] // WebSocket viewers per client address (ClientAddr)
}

// observeReset tells live viewers a window was reset.
func (a *app) observeReset(key string, p limiter.Policy) { a.live.Reset(key, p.Name) }

// authorize applies SPEC §3's token rules (authorizer.authorize).
func (a *app) authorize(c echo.Context, policy string, admin bool) error {
	return a.auth.authorize(c, policy, admin)
}
