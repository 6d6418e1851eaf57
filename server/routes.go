package server

import (
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes is the whole HTTP surface in one place.
func routes(e *echo.Echo, a *app) {
	api := e.Group("/api/v1")
	api.POST("/check", handleCheck(a.store, a.checker, a.auth))
	api.GET("/window", handleWindow(a))
	api.DELETE("/window", handleReset(a))
	api.GET("/policies", handlePolicies(a.store))
	api.POST("/race", handleRace(a))
	api.POST("/lab/check", handleLabCheck(a))
	api.DELETE("/lab", handleLabReset(a))
	api.GET("/openapi.json", handleOpenAPI())

	forwardAuth := handleForwardAuth(a.store, a.checker)
	e.Any(forwardAuthPrefix, forwardAuth)
	e.Any(forwardAuthPrefix+"/*", forwardAuth)

	e.GET("/", handlePage(a))
	e.GET("/lab", handleLabPage(a))
	e.GET("/static/*", handleStatic())
	e.GET("/ws", handleWS(a, a.live))
	e.GET("/ws/lab", handleLabWS(a, a.live))

	e.GET("/healthz", handleHealthz())
	e.GET("/readyz", handleReadyz(a))
	// envoyproxy/ratelimit's probe path, so its manifests' probes work as they are.
	e.GET("/healthcheck", handleReadyz(a))
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{})))
}
