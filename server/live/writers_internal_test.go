package live

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestWritersAreBoundedAndNeverHeldBack: however many viewers a message goes
// to, at most Deps.Writers of their writes are made at once — a burst does
// not make a goroutine per viewer runnable, ahead of the checks — and viewers
// whose writes block (they do not read) neither hold the others back nor
// lose anything: every viewer gets every message, in order, in frames of one
// message or batches.
func TestWritersAreBoundedAndNeverHeldBack(t *testing.T) {
	const (
		viewers  = 60
		writers  = 2
		messages = 30
	)
	v := New(Deps{Instance: "t", Writers: writers})
	w := Window{Key: "crowd", Policy: "demo"}
	srv, ln := serveSlowly(t, v, 200*time.Microsecond)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := make([]chan string, viewers)
	for i := range viewers {
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"?key="+w.Key, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.CloseNow() })
		got[i] = make(chan string, messages+1)
		go readIDs(ctx, conn, got[i])
		if id := <-got[i]; id != "hello" {
			t.Fatalf("viewer %d: first %q, want hello", i, id)
		}
	}
	// The server's side of the first two viewers stops being read from
	// here on: their writes block until let go.
	stuck := ln.conns()[:writers]
	for _, c := range stuck {
		c.block()
	}
	ln.measure.Store(true)
	for k := range messages {
		v.hub.Publish(w, fmt.Appendf(nil, `{"type":"decision","id":"%d"}`, k))
	}
	wantAll := func(i int) {
		t.Helper()
		for k := range messages {
			select {
			case id := <-got[i]:
				if id != fmt.Sprint(k) {
					t.Fatalf("viewer %d: message %s where %d was due", i, id, k)
				}
			case <-ctx.Done():
				t.Fatalf("viewer %d: got %d of %d messages", i, k, messages)
			}
		}
	}
	// The others get everything while the stuck ones still block: had the
	// stuck ones kept their writers, nothing would move until their writes
	// timed out and closed them.
	for i := writers; i < viewers; i++ {
		wantAll(i)
	}
	for _, c := range stuck {
		c.unblock()
	}
	for i := range writers {
		wantAll(i)
	}
	if most := ln.most.Load(); most > writers {
		t.Errorf("%d writes were made at once (besides the blocked ones); want at most %d", most, writers)
	} else {
		t.Logf("at most %d writes at once", most)
	}
}

// serveSlowly serves v's streams — the window named by the query's key, of
// policy demo, with a hello first — on a slowListener pausing over each
// write.
func serveSlowly(t *testing.T, v *View, pause time.Duration) (*httptest.Server, *slowListener) {
	t.Helper()
	ln := &slowListener{Listener: mustListen(t), pause: pause}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(rw, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		w := Window{Key: r.URL.Query().Get("key"), Policy: "demo"}
		v.serve(conn, w, func(time.Time) [][]byte { return [][]byte{[]byte(`{"type":"hello"}`)} })
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, ln
}

// readIDs sends the id of every message conn reads ("hello" for the hello),
// batched frames message by message, until the connection ends.
func readIDs(ctx context.Context, conn *websocket.Conn, out chan<- string) {
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			close(out)
			return
		}
		var msgs []map[string]string
		if len(b) > 0 && b[0] == '[' {
			_ = json.Unmarshal(b, &msgs)
		} else {
			var m map[string]string
			_ = json.Unmarshal(b, &m)
			msgs = append(msgs, m)
		}
		for _, m := range msgs {
			if m["type"] == "hello" {
				out <- "hello"
			} else {
				out <- m["id"]
			}
		}
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// slowListener's connections take pause over each write, so writes made at
// once overlap, and count how many overlap (once measure is set), but for
// those blocked.
type slowListener struct {
	net.Listener
	pause   time.Duration
	measure atomic.Bool
	now     atomic.Int64 // writes in progress
	most    atomic.Int64

	mu   sync.Mutex
	list []*slowConn
}

func (l *slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &slowConn{Conn: c, l: l, gate: make(chan struct{}), closed: make(chan struct{})}
	close(sc.gate)
	l.mu.Lock()
	l.list = append(l.list, sc)
	l.mu.Unlock()
	return sc, nil
}

func (l *slowListener) conns() []*slowConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*slowConn(nil), l.list...)
}

type slowConn struct {
	net.Conn
	l      *slowListener
	writes atomic.Int64 // writes made (the blocked ones once they pass)
	// failLate is how long a blocked write takes to fail once the
	// connection is closed (UnixNano duration; 0: at once).
	failLate atomic.Int64

	mu     sync.Mutex
	gate   chan struct{} // closed: writes pass
	closed chan struct{}
	once   sync.Once
}

// Close ends a blocked write too, as closing a socket does.
func (c *slowConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *slowConn) block() {
	c.mu.Lock()
	c.gate = make(chan struct{})
	c.mu.Unlock()
}

func (c *slowConn) unblock() {
	c.mu.Lock()
	close(c.gate)
	c.mu.Unlock()
}

func (c *slowConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	select {
	case <-gate:
	default: // blocked: waits, uncounted, as a write to a full socket does
		select {
		case <-gate:
			return c.Conn.Write(b)
		case <-c.closed:
			time.Sleep(time.Duration(c.failLate.Load()))
			return 0, net.ErrClosed
		}
	}
	if c.l.measure.Load() {
		n := c.l.now.Add(1)
		defer c.l.now.Add(-1)
		for most := c.l.most.Load(); n > most && !c.l.most.CompareAndSwap(most, n); most = c.l.most.Load() {
		}
	}
	time.Sleep(c.l.pause)
	return c.Conn.Write(b)
}

// TestABusyViewerDoesNotHoldItsWriter: a viewer whose window has news again
// by the time each write to it ends lets the others go first after a few
// writes; with one writer, another viewer's message is written after a
// handful of the busy viewer's writes, while the busy window keeps its news
// coming (a writer that stayed with the busy viewer would write nothing else
// until the news stopped, or until one of its writes took 20 ms).
func TestABusyViewerDoesNotHoldItsWriter(t *testing.T) {
	v := New(Deps{Instance: "t", Writers: 1})
	busy, quiet := Window{Key: "busy", Policy: "demo"}, Window{Key: "quiet", Policy: "demo"}
	srv, ln := serveSlowly(t, v, 2*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(key string) chan string {
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"?key="+key, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.CloseNow() })
		got := make(chan string, 1<<16)
		go readIDs(ctx, conn, got)
		if id := <-got; id != "hello" {
			t.Fatalf("%s: first %q, want hello", key, id)
		}
		return got
	}
	_ = dial(busy.Key) // read, never looked at
	quietGot := dial(quiet.Key)
	busyConn := ln.conns()[0]

	stop := make(chan struct{})
	published := make(chan int)
	go func() { // news for the busy window, faster than one write
		n := 0
		defer func() { published <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			v.hub.Publish(busy, fmt.Appendf(nil, `{"type":"decision","id":"%d"}`, n))
			n++
			time.Sleep(100 * time.Microsecond)
		}
	}()
	time.Sleep(50 * time.Millisecond) // the busy viewer's writer is at it
	before := busyConn.writes.Load()
	v.hub.Publish(quiet, []byte(`{"type":"decision","id":"q"}`))
	select {
	case id := <-quietGot:
		if id != "q" {
			t.Errorf("the quiet viewer read %q, want q", id)
		}
		if n := busyConn.writes.Load() - before; n > 5*flushPasses {
			t.Errorf("the busy viewer got %d writes before the quiet viewer's one; want a few (passes: %d)", n, flushPasses)
		}
	case <-time.After(5 * time.Second):
		t.Error("the quiet viewer's message was not written within 5 s while the busy window had news")
	}
	close(stop)
	t.Logf("%d messages to the busy window meanwhile", <-published)
}

// TestTheWriteQueueReusesItsSlots: a queue that never empties — a stream
// queued again each time one is taken, as when writers are always behind —
// keeps to the slots it needs instead of growing with every stream it ever
// held.
func TestTheWriteQueueReusesItsSlots(t *testing.T) {
	ws := &writers{max: 0} // no writer starts: the test takes from the queue itself
	s := &stream{}
	ws.schedule(s)
	for range 100_000 {
		ws.schedule(s)
		if ws.next() != s {
			t.Fatal("the queue lost a stream")
		}
	}
	if c := cap(ws.queue); c > 16 {
		t.Errorf("the queue grew to %d slots holding %d stream(s)", c, len(ws.queue)-ws.head)
	}
}

// TestAStalledViewerIsCountedHoweverItsEndIsSeen: a viewer whose write
// stalls past writeTimeout is closed and counted as fallen behind, also when
// its closed connection ends the stream's reads before the stalled write
// reports its failure (the order seen under -race on a loaded machine).
func TestAStalledViewerIsCountedHoweverItsEndIsSeen(t *testing.T) {
	var dropped countMetric
	v := New(Deps{Instance: "t", Writers: 1, Metrics: Metrics{DroppedSlow: &dropped}})
	w := Window{Key: "stalls", Policy: "demo"}
	srv, ln := serveSlowly(t, v, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"?key="+w.Key, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	got := make(chan string, 8)
	go readIDs(ctx, conn, got)
	if id := <-got; id != "hello" {
		t.Fatalf("first %q, want hello", id)
	}
	stuck := ln.conns()[0]
	stuck.failLate.Store(int64(time.Second))
	stuck.block()
	v.hub.Publish(w, []byte(`{"type":"decision","id":"1"}`))
	for dropped.n.Load() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the stalled viewer was not counted as fallen behind")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if n := dropped.n.Load(); n != 1 {
		t.Errorf("counted %d drops, want 1", n)
	}
}

type countMetric struct{ n atomic.Int64 }

func (c *countMetric) Inc() { c.n.Add(1) }
