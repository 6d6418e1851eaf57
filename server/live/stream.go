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
// subscribed), then has the writers (writers.go) stream w's messages until
// the viewer leaves, falls behind or the server shuts down. Its own goroutine
// only waits: for pings, for the end, and for a write that failed.
func (v *View) serve(conn *websocket.Conn, w Window, first func(since time.Time) [][]byte) {
	v.conns.Add(1)
	defer v.conns.Done()
	conn.SetReadLimit(readLimit)
	ctx := readControl(conn)
	s := newStream(v, conn, w)
	// Messages published from here on wait until the first ones are sent:
	// the stream is held (kicks starts at 1) and goes to the writers after.
	s.kicks.Store(1)
	sub := v.hub.SubscribeFunc(w, s.kick)
	s.sub = sub
	since := time.Now()
	defer sub.Close()
	defer s.watchdog.Stop()

	if !s.deliver(first(since), false) {
		return
	}
	s.release()

	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	for {
		select {
		case <-s.failed:
			s.endedBehind()
			return
		case <-sub.Done():
			if !s.endedBehind() {
				_ = conn.Close(websocket.StatusGoingAway, "server shutting down")
			}
			return
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, writeTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				s.endedBehind()
				return
			}
		case <-v.ctx.Done():
			if !s.endedBehind() {
				_ = conn.Close(websocket.StatusGoingAway, "server shutting down")
			}
			return
		case <-ctx.Done():
			// The watchdog's close of a stalled write ends the reads too, and
			// that may be seen before the writer reports its failed write.
			s.endedBehind()
			return
		}
	}
}

// endedBehind counts and closes the viewer as one that fell behind when it
// did (dropped by the hub, or a write stalled past writeTimeout), whichever
// way its end was first seen; it reports whether it had.
func (s *stream) endedBehind() bool {
	if errors.Is(s.sub.Err(), hub.ErrSlow) || s.stalled.Load() {
		s.fellBehind()
		return true
	}
	return false
}

// stream writes frames to one viewer.
type stream struct {
	v    *View
	conn *websocket.Conn
	w    Window
	sub  *hub.Subscription[Window]

	// kicks counts the hub's wake-ups since the stream was last written out:
	// the first one queues it for the writers, and a writer that finds more
	// when it is done writes again, so one writer at a time writes a viewer,
	// its frames in order.
	kicks atomic.Int64
	// failed is closed when a writer's write failed: the viewer left, or
	// fell behind; the stream's own goroutine then ends it.
	failed   chan struct{}
	failOnce sync.Once
	// place is the start (UnixNano) of a write made in a writer's place, so
	// the watchdog can give that place up once the write is slow; 0 otherwise.
	place atomic.Int64

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
	s := &stream{v: v, conn: conn, w: w, failed: make(chan struct{})}
	s.watchdog = time.AfterFunc(time.Hour, s.watch)
	s.watchdog.Stop()
	return s
}

// watch is the watchdog of a write: slow after slowWrite, it gives up the
// writer's place (writers.stalled) and waits on; at writeTimeout it closes
// the connection. It checks the clock itself, so a firing that comes late,
// after its write ended, does nothing to the next one.
func (s *stream) watch() {
	start := s.writing.Load()
	if start == 0 {
		return
	}
	took := time.Since(time.Unix(0, start))
	if took >= writeTimeout {
		s.stalled.Store(true)
		_ = s.conn.CloseNow()
		return
	}
	if took >= slowWrite && s.place.CompareAndSwap(start, 0) {
		s.v.writers.stalled()
	}
	if took >= slowWrite {
		s.watchdog.Reset(writeTimeout - took)
		if s.writing.Load() != start {
			// The write ended meanwhile, and the next one may have armed
			// the watchdog before this Reset replaced it: arm it as that
			// write does (a firing with no write in progress does nothing).
			s.watchdog.Reset(min(slowWrite, writeTimeout))
		}
	}
}

// write sends msgs as one frame: the message alone, or a JSON array of them.
// pooled says a writer makes it in its place; it reports whether the writer
// still holds that place (false: given up, the write was slow).
func (s *stream) write(msgs [][]byte, pooled bool) (held bool, err error) {
	frame := msgs[0]
	var buf *[]byte
	if len(msgs) > 1 {
		buf = frames.Get().(*[]byte)
		*buf = bus.AppendBatch((*buf)[:0], msgs)
		frame = *buf
	}
	start := time.Now().UnixNano()
	if pooled {
		s.place.Store(start)
	}
	s.writing.Store(start)
	s.watchdog.Reset(min(slowWrite, writeTimeout))
	err = s.conn.Write(context.Background(), websocket.MessageText, frame)
	s.writing.Store(0)
	s.watchdog.Stop()
	held = !pooled || s.place.CompareAndSwap(start, 0)
	if buf != nil && cap(*buf) <= 2*maxFrame {
		frames.Put(buf)
	}
	return held, err
}

// deliver writes the first frame, on the stream's own goroutine; on failure
// it tells a viewer that fell behind (dropped by the hub, or stalled in a
// write) from one that left.
func (s *stream) deliver(msgs [][]byte, pooled bool) bool {
	if _, err := s.write(msgs, pooled); err == nil {
		return true
	}
	s.endedBehind()
	return false
}

// kick is the hub's wake-up (SubscribeFunc): the first since the stream was
// last written out queues it for a writer.
func (s *stream) kick() {
	if s.kicks.Add(1) == 1 {
		s.v.writers.schedule(s)
	}
}

// release hands the stream to the writers once its first frame is sent:
// what was published meanwhile is queued for them.
func (s *stream) release() {
	if !s.kicks.CompareAndSwap(1, 0) {
		s.v.writers.schedule(s)
	}
}

// flush is a writer's: it writes what waits for the viewer, in frames of up
// to maxFrame, until nothing does — again when more came meanwhile, up to
// flushPasses times; after that the stream goes to the back of the queue, so
// a viewer of a window decided faster than one write to it cannot keep a
// writer while others wait. It reports whether the writer still holds its
// place (false: a write was slow).
func (s *stream) flush(dst [][]byte) (held bool) {
	held = true
	for pass := 1; ; pass++ {
		n := s.kicks.Load()
		for more := true; more; {
			var msgs [][]byte
			msgs, more = s.sub.Take(dst, maxFrame)
			if len(msgs) == 0 {
				break
			}
			var err error
			select {
			case <-s.failed: // until its goroutine ends it, what comes is let go
			default:
				var h bool
				h, err = s.write(msgs, held)
				held = held && h
			}
			clear(msgs) // sent: let the messages go
			if err != nil {
				s.failOnce.Do(func() { close(s.failed) })
			}
		}
		if s.kicks.CompareAndSwap(n, 0) {
			return held
		}
		if pass == flushPasses {
			// Queued again, and still this stream's only writer until a
			// writer takes it from the queue.
			s.kicks.Store(1)
			s.v.writers.schedule(s)
			return held
		}
	}
}

// flushPasses is how many times a writer writes one viewer out before it
// lets the others go first. Going to the back after every write, when news
// came meanwhile, made the 10,000-viewer run's checks wait longer (p99 54–79
// ms against 20) for no fairer delivery.
const flushPasses = 4

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
