package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/hub"
)

// Limits of one viewer connection.
const (
	wsWriteTimeout = 5 * time.Second
	wsPingInterval = 20 * time.Second
	wsReadLimit    = 1024 // the stream is server to client; a client sends only control frames
)

// handleWS streams one window to a viewer: GET /ws?key=&policy=.
func handleWS(a *app, l *live) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, pol, err := windowParams(c, a, false)
		if err != nil {
			return err
		}
		if !originAllowed(c.Request(), a.cfg.AllowedOrigins) {
			return newProblem(http.StatusForbidden, "origin "+truncate(c.Request().Header.Get("Origin"), 100)+" may not open this stream; see --allowed-origins")
		}
		conn, err := websocket.Accept(c.Response(), c.Request(), &websocket.AcceptOptions{
			InsecureSkipVerify: true, // the origin was checked above, with a problem document on failure
		})
		if err != nil {
			return nil // Accept has answered the client
		}
		defer conn.CloseNow()
		conn.SetReadLimit(wsReadLimit)
		l.conns.Add(1)
		defer l.conns.Done()
		l.serve(conn, key, pol)
		return nil
	}
}

// serve writes the stream until the viewer leaves, falls behind, stops
// answering pings, or the server shuts down.
func (l *live) serve(conn *websocket.Conn, key string, pol limiter.Policy) {
	ctx := readControl(conn)
	topic := topicOf(key, pol.Name)
	sub := l.hub.Subscribe(topic)
	defer sub.Close()

	// Writes carry no context (that would cost a timer and a callback per
	// frame, ten frames a second per viewer); a watchdog armed around each
	// write closes a connection whose write has taken wsWriteTimeout. It
	// checks the clock itself, so a firing that comes late, after its write
	// succeeded, cannot close the connection during the next one. A viewer
	// the hub drops for falling behind is stuck in a write, which ends the
	// same way.
	var writing atomic.Int64 // when the write in progress began (UnixNano); 0 between writes
	var stalled atomic.Bool
	watchdog := time.AfterFunc(time.Hour, func() {
		if start := writing.Load(); start != 0 && time.Since(time.Unix(0, start)) >= wsWriteTimeout {
			stalled.Store(true)
			_ = conn.CloseNow()
		}
	})
	watchdog.Stop()
	defer watchdog.Stop()
	write := func(msg []byte) error {
		writing.Store(time.Now().UnixNano())
		watchdog.Reset(wsWriteTimeout)
		err := conn.Write(context.Background(), websocket.MessageText, msg)
		writing.Store(0)
		watchdog.Stop()
		return err
	}
	fellBehind := func() {
		l.a.metrics.wsDropped.Inc()
		l.a.log.Warn("dropped a viewer that fell behind", "key", key, "policy", pol.Name)
		_ = conn.Close(websocket.StatusTryAgainLater, "fell behind")
	}
	// deliver writes one message; on failure it tells a viewer that fell
	// behind (dropped by the hub, or stalled) from one that left.
	deliver := func(m []byte) bool {
		if write(m) == nil {
			return true
		}
		if errors.Is(sub.Err(), hub.ErrSlow) || stalled.Load() {
			fellBehind()
		}
		return false
	}

	first := [][]byte{
		encode(newHelloMsg(l.a.instance, key, pol, l.a.cfg.TickInterval.Milliseconds())),
		*l.status.Load(),
	}
	if snap, ok := l.snapshot(ctx, topic); ok {
		first = append(first, snap)
	}
	for _, m := range first {
		if !deliver(m) {
			return
		}
	}

	ping := time.NewTicker(wsPingInterval)
	defer ping.Stop()
	var latest [][]byte
	for {
		select {
		case m := <-sub.C():
			if !deliver(m) {
				return
			}
		case <-sub.Pending():
			// Queued messages (decisions, snapshots) go before the newest
			// tick and viewer count, which replaced any this viewer missed.
			for queued := len(sub.C()); queued > 0; queued-- {
				if !deliver(<-sub.C()) {
					return
				}
			}
			latest = sub.Latest(latest[:0])
			for _, m := range latest {
				if !deliver(m) {
					return
				}
			}
		case <-sub.Done():
			if errors.Is(sub.Err(), hub.ErrSlow) {
				fellBehind()
				return
			}
			_ = conn.Close(websocket.StatusGoingAway, "server shutting down")
			return
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, wsWriteTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return
			}
		case <-l.ctx.Done():
			_ = conn.Close(websocket.StatusGoingAway, "server shutting down")
			return
		case <-ctx.Done():
			return
		}
	}
}

// readControl reads what a viewer sends: control frames (pongs, close) are
// handled by the library, and a data frame closes the stream with 1008. The
// returned context ends when the connection does (not at shutdown, so a 1001
// can still be sent). Unlike conn.CloseRead it drains the data frame first:
// CloseRead keeps the read lock and delays its close handshake by 5 s.
func readControl(conn *websocket.Conn) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		_, r, err := conn.Reader(ctx)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return
		}
		_ = conn.Close(websocket.StatusPolicyViolation, "this stream is server to client only")
	}()
	return ctx
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
