package server

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// Server timeouts: slow or idle clients must not pin connections. A request's
// headers must arrive within readHeaderTimeout, the whole request with its
// body within readTimeout; a keep-alive connection waits idleTimeout for its
// next request.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second
	idleTimeout       = 30 * time.Second
)

// newHTTPServer serves h with the timeouts above, its own errors logged as
// warnings.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// newEcho is the HTTP server's handler: the routes behind the metrics, the
// access log, Recover and the hardening headers.
func newEcho(p *parts) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(p.log)
	traffic := &httpMetrics{m: p.metrics}
	e.Use(traffic.middleware) // outermost: it counts the status the client got
	// The access log is outside Recover, so a recovered panic is logged with
	// the 500 it became.
	e.Use(middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		Skipper: func(c echo.Context) bool {
			switch c.Path() {
			case "/healthz", "/readyz", "/metrics", "/static/*":
				return true
			}
			return false
		},
		LogMethod: true, LogURIPath: true, LogStatus: true, LogLatency: true,
		// An error (a problem document, a 404, a 500) is written here, so the
		// line records the status the client received, not the 200 the
		// response held before the handler failed.
		HandleError: true,
		LogValuesFunc: func(c echo.Context, v middleware.RequestLoggerValues) error {
			// Checks are the hot path and are counted in metrics; their access
			// lines are debug-level unless something failed. Nothing is built
			// for a line that is not logged (the remote address included).
			level := slog.LevelInfo
			if hotPath(c.Path()) && v.Status < 500 {
				level = slog.LevelDebug
			}
			ctx := c.Request().Context()
			if !p.log.Enabled(ctx, level) {
				return nil
			}
			p.log.LogAttrs(ctx, level, "request", slog.String("method", v.Method),
				slog.String("path", v.URIPath), slog.Int("status", v.Status),
				slog.Float64("latency_ms", float64(v.Latency.Microseconds())/1000), slog.String("remote", c.RealIP()))
			return nil
		},
	}))
	e.Use(middleware.Recover())
	e.Use(securityHeaders)
	routes(e, p)
	traffic.prepare(e.Routes())
	return e
}

// hotPath reports whether a route answers checks: counted in metrics, logged
// at debug level.
func hotPath(path string) bool {
	switch path {
	case "/api/v1/check", forwardAuthPrefix, forwardAuthPrefix + "/*",
		"/api/v1/leases", "/api/v1/leases/:leaseId", "/api/v1/leases/:leaseId/renew":
		return true
	}
	return false
}

// securityHeaders sets the usual hardening headers on every response. The
// page needs no inline script or style, so the policy allows none. The values
// are shared, set by canonical key: this runs on every request (net/http
// never writes into a header's value slice; Add appends to a full one, which
// copies it).
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		for _, kv := range hardening {
			h[kv.key] = kv.value
		}
		return next(c)
	}
}

var hardening = []struct {
	key   string
	value []string
}{
	{"X-Content-Type-Options", []string{"nosniff"}},
	{"X-Frame-Options", []string{"DENY"}},
	{"Referrer-Policy", []string{"no-referrer"}},
	{"Cross-Origin-Opener-Policy", []string{"same-origin"}},
	{"Content-Security-Policy", []string{"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"}},
}

// displayAddr turns a wildcard listen address into one a browser can open.
func displayAddr(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		return fmt.Sprintf("localhost:%d", tcp.Port)
	}
	return tcp.String()
}
