package server_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/internal/redistest"
)

// TestViewerFlood: floodViewers viewers, each on a window of its own, 64 from
// each of many addresses, fill the instance's cap but one. The last place
// goes to a viewer from another address, which for 12 s is never told Redis
// is down and gets a snapshot at least every 1.5 s; a viewer beyond the
// instance's cap, and one beyond its address's cap, are refused with 503 and
// Retry-After: 5 before any upgrade. No viewer of the flood is dropped.
func TestViewerFlood(t *testing.T) {
	const (
		perClient = 64
		observe   = 12 * time.Second
		maxGap    = 1500 * time.Millisecond
	)
	url := redistest.RealURL(t)
	app := apptest.StartProcess(t, map[string]string{"REDIS_URL": url}, 0,
		"--max-viewers", strconv.Itoa(floodViewers+1), "--max-viewers-per-client", strconv.Itoa(perClient))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server's warnings:\n%s", lastLines(grepLines(app.Logs(), "level=WARN"), 40))
		}
	})
	bus := watchBus(t, url)
	start := time.Now()
	crowd := openCrowd(t, app.Addr, floodViewers, perClient)
	t.Logf("%d viewers connected in %v", floodViewers, time.Since(start))

	obs := watch(t, app, "policy=demo&key="+newKey(), nil) // from 127.0.0.1, which holds none
	stalled := watchStalls(t)
	lastSnap := time.Now()
	var worstSnap, worstJudged, worstTick time.Duration
	lastTick := time.Now()
	snaps := 0
	deadline := time.After(observe)
watching:
	for {
		select {
		case m, ok := <-obs.msgs:
			if !ok {
				t.Fatalf("the observer's stream ended: %v", <-obs.err)
			}
			now := time.Now()
			switch m["type"] {
			case "status":
				if m["redis"] != "up" {
					t.Errorf("the observer was told redis is %v after %v", m["redis"], now.Sub(start))
				}
			case "snapshot":
				worstSnap = max(worstSnap, now.Sub(lastSnap))
				worstJudged = max(worstJudged, now.Sub(lastSnap)-stalled.within(lastSnap, now))
				lastSnap = now
				snaps++
			case "tick":
				worstTick = max(worstTick, now.Sub(lastTick))
				lastTick = now
			}
		case <-deadline:
			break watching
		}
	}
	worstSnap = max(worstSnap, time.Since(lastSnap))
	worstJudged = max(worstJudged, time.Since(lastSnap)-stalled.within(lastSnap, time.Now()))
	t.Logf("observer: %d snapshots in %v, at most %v apart (%v less the times this process could not run); ticks at most %v apart",
		snaps, observe, worstSnap, worstJudged, worstTick)
	if worstJudged > maxGap {
		t.Errorf("snapshots up to %v apart, want at most %v", worstJudged, maxGap)
	}

	refused(t, app, "/ws?policy=demo&key="+newKey(), "", "--max-viewers")
	refusedFrom(t, app.Addr, crowdAddr(0), "--max-viewers-per-client")
	m := metrics(t, app)
	for _, line := range []string{
		fmt.Sprintf("ratescope_ws_viewers %d\n", floodViewers+1),
		"ratescope_ws_dropped_slow_total 0\n",
		`ratescope_ws_refused_total{reason="client"} 1` + "\n",
		`ratescope_ws_refused_total{reason="instance"} 1` + "\n",
	} {
		if !strings.Contains(m, line) {
			t.Errorf("/metrics lacks %q:\n%s", strings.TrimSpace(line), grepLines(m, "ratescope_ws_"))
		}
	}
	// Viewer counts went to other instances window by window, in small messages.
	n, largest, listing := bus.stats()
	t.Logf("presence: %d windows announced, the largest message %d bytes", n, largest)
	if n < floodViewers || largest > maxPresencePayload || listing > 0 {
		t.Errorf("presence: %d windows announced, the largest message %d bytes, %d envelopes without one window; want ≥ %d, ≤ %d bytes, 0",
			n, largest, listing, floodViewers, maxPresencePayload)
	}
	if n := crowd.ended.Load(); n > 0 {
		t.Errorf("%d viewers of the flood lost their stream, e.g. %v", n, crowd.firstEnd.Load())
	}
}

// crowdAddr is the local address of the viewers numbered i*perClient to
// (i+1)*perClient-1 of a crowd.
func crowdAddr(i int) string { return fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250) }

// crowd is many lightweight viewers: one goroutine each that reads and
// discards frames and answers pings, so the test process holds thousands.
type crowd struct {
	ended    atomic.Int64
	firstEnd atomic.Value
}

// openCrowd connects n viewers to addr, perClient from each local address,
// each watching a window of its own, and closes them when the test ends.
func openCrowd(t *testing.T, addr string, n, perClient int) *crowd {
	t.Helper()
	return openCrowdAt(t, addr, n, perClient, func(i int) string { return fmt.Sprintf("/ws?policy=demo&key=crowd-%d", i) })
}

// openCrowdAt is openCrowd with viewer i watching the stream at path(i).
func openCrowdAt(t *testing.T, addr string, n, perClient int, path func(i int) string) *crowd {
	t.Helper()
	c := &crowd{}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range conns {
			conn.Close()
		}
	})
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && failed.Load() == nil; i = int(next.Add(1)) - 1 {
				conn, br, resp, err := dialStream(addr, crowdAddr(i/perClient), path(i))
				if err == nil && resp.StatusCode != http.StatusSwitchingProtocols {
					err = fmt.Errorf("viewer %d: %s", i, resp.Status)
				}
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				mu.Lock()
				conns = append(conns, conn)
				mu.Unlock()
				go func() {
					if err := discardFrames(conn, br); err != nil && !errors.Is(err, net.ErrClosed) {
						c.ended.Add(1)
						c.firstEnd.CompareAndSwap(nil, err)
					}
				}()
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("failed to open the crowd: %v", err)
	}
	return c
}

// dialStream asks for a stream at path from the local address from, and
// returns the server's answer; after a 101 the connection carries frames.
func dialStream(addr, from, path string) (net.Conn, *bufio.Reader, *http.Response, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 30 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, nil, nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	br := bufio.NewReaderSize(conn, 1024)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, br, resp, nil
}

// discardFrames reads a server's WebSocket frames until the connection ends,
// answering pings with pongs (masked, as a client's frames must be).
func discardFrames(conn net.Conn, br *bufio.Reader) error {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(br, hdr[:2]); err != nil {
			return err
		}
		op, n := hdr[0]&0x0f, int(hdr[1]&0x7f)
		switch n {
		case 126:
			if _, err := io.ReadFull(br, hdr[:2]); err != nil {
				return err
			}
			n = int(binary.BigEndian.Uint16(hdr[:2]))
		case 127:
			if _, err := io.ReadFull(br, hdr[:8]); err != nil {
				return err
			}
			n = int(binary.BigEndian.Uint64(hdr[:8]))
		}
		switch op {
		case 0x8: // close
			return fmt.Errorf("closed by the server")
		case 0x9: // ping: pong with the same payload and a zero mask
			payload := make([]byte, n)
			if _, err := io.ReadFull(br, payload); err != nil {
				return err
			}
			if _, err := conn.Write(append([]byte{0x8a, 0x80 | byte(n), 0, 0, 0, 0}, payload...)); err != nil {
				return err
			}
		default:
			if _, err := br.Discard(n); err != nil {
				return err
			}
		}
	}
}

// refusedFrom asks for a stream from the local address from and wants it
// refused before the upgrade, with 503, Retry-After: 5 and a problem naming
// flag.
func refusedFrom(t *testing.T, addr, from, flag string) {
	t.Helper()
	conn, _, resp, err := dialStream(addr, from, "/ws?policy=demo&key="+newKey())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a viewer from %s: %s, want 503", from, resp.Status)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.Header.Get("Retry-After") != "5" || !strings.Contains(string(b), flag+")") {
		t.Fatalf("a viewer from %s: %v %s, want Retry-After: 5 and a problem naming %s", from, resp.Header, b, flag)
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// maxPresencePayload bounds a PUBLISH carrying viewer counts: a batch of
// per-window envelopes, never one message listing thousands of windows.
const maxPresencePayload = 32 << 10

// busWatch reads the Pub/Sub traffic of ratescope instances.
type busWatch struct {
	mu      sync.Mutex
	windows map[string]bool // windows some presence envelope named
	largest int             // bytes of the largest payload holding presence
	listing int             // presence envelopes naming no single window
}

// watchBus subscribes to every ratescope channel of the Redis at url until
// the test ends.
func watchBus(t *testing.T, url string) *busWatch {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ps := rdb.PSubscribe(context.Background(), "ratescope:*")
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ps.Close() })
	b := &busWatch{windows: map[string]bool{}}
	go func() {
		for m := range ps.Channel(redis.WithChannelSize(1 << 16)) {
			envs, err := bus.Decode([]byte(m.Payload))
			if err != nil {
				continue
			}
			b.mu.Lock()
			for _, e := range envs {
				if e.Kind != bus.KindPresence {
					continue
				}
				b.largest = max(b.largest, len(m.Payload))
				if e.Topic == "" || !strings.Contains(e.Topic, "|") {
					b.listing++
				} else {
					b.windows[e.Topic] = true
				}
			}
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *busWatch) stats() (windows, largest, listing int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.windows), b.largest, b.listing
}

// stallLog records when this process could not run for more than
// stallAtLeast: on a machine too busy to schedule the test, what it reads
// arrives late by as much, and a gap it measures is longer than the server
// made it. Only those spans are discounted; a server that is slow on its own
// still fails.
type stallLog struct {
	mu    sync.Mutex
	spans [][2]time.Time
}

const stallAtLeast = 50 * time.Millisecond

func watchStalls(t *testing.T) *stallLog {
	s := &stallLog{}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		const nap = 5 * time.Millisecond
		for {
			before := time.Now()
			select {
			case <-done:
				return
			case <-time.After(nap):
			}
			if now := time.Now(); now.Sub(before)-nap > stallAtLeast {
				s.mu.Lock()
				s.spans = append(s.spans, [2]time.Time{before.Add(nap), now})
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// within is how long, between a and b, this process could not run.
func (s *stallLog) within(a, b time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	for _, sp := range s.spans {
		from, to := later(sp[0], a), earlier(sp[1], b)
		if to.After(from) {
			d += to.Sub(from)
		}
	}
	return d
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
