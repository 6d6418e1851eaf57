package server

import (
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratescope/ratescope/internal/naive"
)

// routes is the whole HTTP surface in one place, with what each route's
// handler uses.
func routes(e *echo.Echo, p *parts) {
	redis := redisCalls{timeout: p.checkTimeout, errors: p.metrics.redisErrors}
	windows := windowAPI{store: p.store, auth: p.auth, lim: p.lim, redis: redis, resolve: p.checker.PolicyFor}
	streams := streams{live: p.live, origins: p.origins, store: p.store, viewers: p.viewers, refused: p.metrics.wsRefused}
	shell := pageShell{tickMs: p.tickInterval.Milliseconds(), instance: p.instance}
	overview := overviewAPI{store: p.store, auth: p.auth, ov: p.overview}
	lab := labAPI{
		lim: p.lim, store: p.store, auth: p.auth, labs: p.labs, recent: p.labRecent,
		live: p.live, redis: redis, refused: p.metrics.labRefused,
	}
	adjust := adjustAPI{store: p.store, auth: p.auth, lim: p.lim, redis: redis, live: p.live, log: p.log, resolve: p.checker.PolicyFor}
	overrides := overridesAPI{store: p.store, auth: p.auth, ten: p.tenants, redis: redis, log: p.log}
	leases := leaseAPI{store: p.store, auth: p.auth, checker: p.checker, redis: redis, live: p.live, log: p.log, metrics: p.metrics}
	race := raceAPI{
		store: p.store, lim: p.lim, naive: naive.New(p.rdb), races: p.races,
		live: p.live, errors: p.metrics.redisErrors, log: p.log,
	}

	api := e.Group("/api/v1")
	api.POST("/check", handleCheck(checkAPI{store: p.store, checker: p.checker, auth: p.auth, waiters: p.waiters, live: p.live, log: p.log,
		redisUp: func() bool { return p.ready.State().Ready() }}))
	api.POST("/refund", handleRefund(adjust))
	api.POST("/settle", handleSettle(adjust))
	api.POST("/leases", handleAcquire(leases))
	api.POST("/leases/:leaseId/renew", handleRenew(leases))
	api.DELETE("/leases/:leaseId", handleRelease(leases))
	api.GET("/window", handleWindow(windows))
	api.GET("/explain", handleExplain(windows))
	api.DELETE("/window", handleReset(windows, p.live, p.log))
	api.GET("/usage", handleUsage(windows, p.tenants))
	api.GET("/policies", handlePolicies(p.store))
	api.PUT("/overrides", handlePutOverride(overrides))
	api.GET("/overrides", handleGetOverrides(overrides))
	api.DELETE("/overrides", handleDeleteOverride(overrides))
	api.POST("/race", handleRace(race))
	api.POST("/lab/check", handleLabCheck(lab))
	api.DELETE("/lab", handleLabReset(lab))
	api.GET("/overview", handleOverview(overview))
	api.GET("/openapi.json", handleOpenAPI())

	forwardAuth := handleForwardAuth(p.store, p.checker)
	e.Any(forwardAuthPrefix, forwardAuth)
	e.Any(forwardAuthPrefix+"/*", forwardAuth)

	e.GET("/", handlePage(p.store, p.inForce.live, shell))
	e.GET("/lab", handleLabPage(lab, shell))
	e.GET("/overview", handleOverviewPage(overview, shell))
	e.GET("/static/*", handleStatic())
	e.GET("/ws", handleWS(windows, streams))
	e.GET("/ws/lab", handleLabWS(streams))
	e.GET("/ws/overview", handleOverviewWS(overview, streams))

	e.GET("/healthz", handleHealthz())
	e.GET("/readyz", handleReadyz(p.ready, p.failMode))
	// envoyproxy/ratelimit's probe path, so its manifests' probes work as they are.
	e.GET("/healthcheck", handleReadyz(p.ready, p.failMode))
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(p.metrics.reg, promhttp.HandlerOpts{})))
}
