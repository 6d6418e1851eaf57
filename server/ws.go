package server

import (
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/live"
)

// streams is what every WebSocket route uses to admit a viewer and serve
// it: the live view, the origins allowed besides the page's own, the trusted
// proxies (whose clients are counted, not the proxy), and the caps on
// viewers with the counter of those refused.
type streams struct {
	live    *live.View
	origins []string // --allowed-origins
	store   *configStore
	viewers *slots[string] // viewers per client address (ClientAddr) and per instance
	refused *prometheus.CounterVec
}

// handleWS checks a stream request — GET /ws?key=&policy= — and hands the
// connection to the live view.
func handleWS(w windowAPI, s streams) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, pol, err := w.params(c, false)
		if err != nil {
			return err
		}
		return s.accept(c, func(conn *websocket.Conn) { s.live.Serve(conn, key, pol.Policy) })
	}
}

// handleLabWS checks a lab stream request — GET /ws/lab?lab= — and hands the
// connection to the live view. Watching writes nothing: no token; origins as /ws.
func handleLabWS(s streams) echo.HandlerFunc {
	return func(c echo.Context) error {
		lab, err := readLab(c)
		if err != nil {
			return err
		}
		return s.accept(c, func(conn *websocket.Conn) { s.live.ServeLab(conn, lab) })
	}
}

// accept upgrades a checked stream request from an allowed origin and serves
// it until it ends; a foreign origin gets 403 as a problem document. Every
// stream is a viewer: beyond the caps on viewers per instance and per client
// the upgrade is refused with 503 before anything is upgraded.
func (s streams) accept(c echo.Context, serve func(*websocket.Conn)) error {
	if !originAllowed(c.Request(), s.origins) {
		return newProblem(http.StatusForbidden, "origin "+truncate(c.Request().Header.Get("Origin"), 100)+" may not open this stream; see --allowed-origins")
	}
	client := viewerClient(c.Request(), s.store.load().trusted)
	if why := s.viewers.take(client); why != "" {
		s.refused.WithLabelValues(why).Inc()
		detail := "this instance serves as many viewers as it may (--max-viewers); try again later"
		if why == refusedClient {
			detail = "this client address watches as many streams as it may (--max-viewers-per-client); close one or try again later"
		}
		return newProblem(http.StatusServiceUnavailable, detail).withHeader("Retry-After", viewersRetryAfter)
	}
	defer s.viewers.give(client)
	conn, err := websocket.Accept(c.Response(), c.Request(), &websocket.AcceptOptions{
		InsecureSkipVerify: true, // the origin was checked above, with a problem document on failure
	})
	if err != nil {
		return nil // Accept has answered the client
	}
	defer conn.CloseNow()
	serve(conn)
	return nil
}

// viewersRetryAfter is the Retry-After of a viewer refused by a cap, in
// seconds: viewers leave as people close tabs, not within a second.
const viewersRetryAfter = "5"

// viewerClient is whose viewer a stream request is: the client address,
// behind trusted proxies the client they forward (httplimit.ClientAddr), or
// the peer as given when that cannot be read.
func viewerClient(r *http.Request, trusted httplimit.TrustedProxies) string {
	if addr, err := httplimit.ClientAddr(r, trusted); err == nil {
		return addr
	}
	return r.RemoteAddr
}

// originAllowed admits requests without an Origin (not from a browser), from
// the request's own host, or from --allowed-origins (a full origin such as
// https://app.example.com, a host, or a host pattern such as *.example.com).
func originAllowed(r *http.Request, allowed []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, a := range allowed {
		if strings.EqualFold(a, origin) || strings.EqualFold(a, u.Host) {
			return true
		}
		if ok, _ := path.Match(strings.ToLower(a), strings.ToLower(u.Host)); ok {
			return true
		}
	}
	return false
}
