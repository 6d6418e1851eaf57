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
//
// An error the handler returns is answered (c.Error, Echo's HTTPErrorHandler)
// inside the middleware, as Echo's own Logger does, and then returned as
// usual: Limit with httplimit.CountOnly sees the status of
// echo.NewHTTPError(http.StatusUnauthorized), where Echo would otherwise
// write it only after the middleware is done. Echo's default error handler
// answers once; a handler of your own should skip a committed response.
func Echo(mw func(http.Handler) http.Handler) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err = next(c); err != nil {
					c.Error(err)
				}
			})).ServeHTTP(c.Response(), c.Request())
			return err
		}
	}
}
