// Package echolimit adapts httplimit's middleware to Echo, so services on
// plain net/http link no web framework by importing httplimit:
//
//	mw := httplimit.New(lim)
//	e.POST("/login", login, echolimit.Echo(mw.Limit(loginPolicy)))
package echolimit

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// Echo adapts net/http middleware, such as httplimit's Limit, to Echo.
func Echo(mw func(http.Handler) http.Handler) echo.MiddlewareFunc {
	return echo.WrapMiddleware(mw)
}
