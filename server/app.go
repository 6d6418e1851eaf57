package server

import (
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
	"github.com/ratescope/ratescope/server/overview"
	"github.com/ratescope/ratescope/server/readiness"
	"github.com/ratescope/ratescope/server/tenants"
)

// parts are what Run builds for the HTTP routes. Only routes (routes.go)
// reads them: it hands each route's handler the few it uses.
type parts struct {
	store    *configStore // policies, trusted proxies and routes in force
	checker  *httplimit.Checker
	auth     authorizer
	lim      *limiter.Limiter
	rdb      redis.UniversalClient
	live     *live.View
	overview *overview.Overview // the traffic of every policy, across instances
	ready    *readiness.Monitor // whether Redis accepts writes: /readyz
	tenants  *tenants.Store     // per-client overrides of the policies' rules
	inForce  rulesInForce       // which rules decide a key: what the page and overview show
	metrics  *metrics
	log      *slog.Logger

	instance     string
	tickInterval time.Duration
	checkTimeout time.Duration
	failMode     httplimit.FailMode
	origins      []string // --allowed-origins

	viewers   *slots[string] // WebSocket viewers per client address and per instance
	races     *races
	labs      labRegistry // the cap on labs held in Redis (--max-labs)
	labRecent labRecent   // each lab's recent requests, for the tabs that join
	waiters   *waiters    // checks held until their booked slots (--max-waiters)
}
