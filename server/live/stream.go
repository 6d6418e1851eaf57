package live

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live/hub"
)

// Limits of one viewer connection.
const (
	writeTimeout = 5 * time.Second
	pingInterval = 20 * time.Second
	readLimit    = 1024 // the stream is server to client; a client sends only control frames
	// maxFrame bounds the messages one frame carries, so one write stays short.
	maxFrame = 1 << 20
)

// frames are reusable buffers for batched frames, shared by all viewers: memory
// follows the writes in progress, not the number of viewers.
var frames = sync.Pool{New: func() any { return new([]byte) }}

// Serve streams the window (key, p) to conn until the viewer leaves, falls behind,
// stops answering pings, or the server shuts down. The caller has checked the
// request and accepted the WebSocket; Serve closes it with a status, and the
// caller may CloseNow it afterwards. The viewer sees the window under the
// rules in force for key (an override's, Deps.Resolve), which hello names.
func (v *View) Serve(conn *websocket.Conn, key string, p limiter.Policy) {
	w := Window{Key: key, Policy: p.Name}
	v.serve(conn, w, func(since time.Time) [][]byte {
		// Read once subscribed: a change after this reaches the viewer
		// in an override message (OverrideChanged).
		p, o := v.inForce(key, p)
		first := [][]byte{helloMessage(v.d.Instance, key, p, o, v.d.TickInterval.Milliseconds()), *v.clock.status.Load()}
		if snap, ok := v.snapshot(w, since); ok {
			first = append(first, snap)
		}
		return first
	})
}

// serve subscribes conn to w, sends the first messages (given when it
// subscribed), then streams w's messages until the viewer leaves, falls
// behind or the server shuts down.
func (v *View) serve(conn *websocket.Conn, w Window, first func(since time.Time) [][]byte) {
	v.conns.Add(1)
	defer v.conns.Done()
	conn.SetReadLimit(readLimit)
	ctx := readControl(conn)
	sub := v.hub.Subscribe(w)
	since := time.Now()
	defer sub.Close()
	s := newStream(v, conn, w)
	defer s.watchdog.Stop()

	if !s.deliver(first(since), sub) {
		return
	}

	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	var small [8][]byte // most frames carry a message or two
	for {
		select {
		case <-sub.Ready():
			for more := true; more; {
				var msgs [][]byte
				msgs, more = sub.Take(small[:0], maxFrame)
				if len(msgs) == 0 {
					break
				}
				ok := s.deliver(msgs, sub)
				clear(msgs) // sent: let the messages go
				if !ok {
					return
				}
			}
		case <-sub.Done():
			if errors.Is(sub.Err(), hub.ErrSlow) {
				s.fellBehind()
				return
			}
			_ = conn.Close(websocket.StatusGoingAway, "server shutting down")
			return
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, writeTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return
			}
		case <-v.ctx.Done():
			_ = conn.Close(websocket.StatusGoingAway, "server shutting down")
			return
		case <-ctx.Done():
			return
		}
	}
}

// stream writes frames to one viewer.
type stream struct {
	v    *View
	conn *websocket.Conn
	w    Window

	// Writes carry no context (that would cost a timer and a callback per frame);
	// a watchdog armed around each write closes a connection whose write has taken
	// writeTimeout. It checks the clock itself, so a firing that comes late, after
	// its write succeeded, cannot close the connection during the next one.
	watchdog *time.Timer
	writing  atomic.Int64 // when the write in progress began (UnixNano); 0 between writes
	stalled  atomic.Bool
	behind   sync.Once
}

func newStream(v *View, conn *websocket.Conn, w Window) *stream {
	s := &stream{v: v, conn: conn, w: w}
	s.watchdog = time.AfterFunc(time.Hour, func() {
		if start := s.writing.Load(); start != 0 && time.Since(time.Unix(0, start)) >= writeTimeout {
			s.stalled.Store(true)
			_ = conn.CloseNow()
		}
	})
	s.watchdog.Stop()
	return s
}

// write sends msgs as one frame: the message alone, or a JSON array of them.
func (s *stream) write(msgs [][]byte) error {
	frame := msgs[0]
	var buf *[]byte
	if len(msgs) > 1 {
		buf = frames.Get().(*[]byte)
		*buf = bus.AppendBatch((*buf)[:0], msgs)
		frame = *buf
	}
	s.writing.Store(time.Now().UnixNano())
	s.watchdog.Reset(writeTimeout)
	err := s.conn.Write(context.Background(), websocket.MessageText, frame)
	s.writing.Store(0)
	s.watchdog.Stop()
	if buf != nil && cap(*buf) <= 2*maxFrame {
		frames.Put(buf)
	}
	return err
}

// deliver writes one frame; on failure it tells a viewer that fell behind (dropped
// by the hub, or stalled in a write) from one that left.
func (s *stream) deliver(msgs [][]byte, sub *hub.Subscription[Window]) bool {
	if s.write(msgs) == nil {
		return true
	}
	if errors.Is(sub.Err(), hub.ErrSlow) || s.stalled.Load() {
		s.fellBehind()
	}
	return false
}

// fellBehind counts and closes a viewer that fell behind (SPEC §4: 1013), once.
func (s *stream) fellBehind() {
	s.behind.Do(func() {
		s.v.d.Metrics.DroppedSlow.Inc()
		s.v.d.Log.Warn("dropped a viewer that fell behind", "key", s.w.Key, "policy", s.w.Policy)
		_ = s.conn.Close(websocket.StatusTryAgainLater, "fell behind")
	})
}

// readControl reads what a viewer sends: control frames (pongs, close) are handled
// by the library, and a data frame closes the stream with 1008. The returned context
// ends when the connection does (not at shutdown, so a 1001 can still be sent).
// Unlike conn.CloseRead it drains the data frame first: CloseRead keeps the read lock
// and delays its close handshake by 5 s.
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
