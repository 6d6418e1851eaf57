package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

const (
	// fanPolicy has room for every timed check, so each one is a decision
	// with an id, and a window long enough to hold them all.
	fanPolicy = "fan=100000/1m"
	// dialers is how many viewers connect at once, like a crowd arriving.
	dialers = 16
	// settle lets a fresh server finish starting before memory is read.
	settle = time.Second
	// idle is how long the viewers sit connected (ticks and snapshots only)
	// before memory is read again.
	idle = 2 * time.Second
	// deliveryTimeout is the longest a decision may take to reach every viewer.
	deliveryTimeout = 5 * time.Second
)

// Metrics read from the server process.
const (
	mHeap       = "go_memstats_heap_inuse_bytes"
	mRSS        = "process_resident_memory_bytes"
	mGoroutines = "go_goroutines"
	mViewers    = "ratescope_ws_viewers"
	mDropped    = "ratescope_ws_dropped_slow_total"
)

var (
	// decisionMark finds decision messages without decoding every tick.
	decisionMark = []byte(`"type":"decision"`)
	idMark       = []byte(`"id":"`)
)

// viewer is one WebSocket client; got maps decision ids to arrival times.
type viewer struct {
	mu  sync.Mutex
	got map[string]time.Time
}

// crowd is every viewer plus counters the timing loop can poll cheaply.
type crowd struct {
	viewers  []*viewer
	received atomic.Int64 // decision messages received, all viewers together
	ended    atomic.Int64 // viewers whose stream ended before the test did
	endedWhy sync.Map     // close reason → struct{}
}

// read consumes one viewer's stream until it ends, noting when each decision
// arrives. One buffer per viewer, reused, keeps the client cheap.
func (c *crowd) read(ctx context.Context, conn *websocket.Conn, v *viewer) {
	defer conn.CloseNow()
	var buf bytes.Buffer
	for {
		_, r, err := conn.Reader(ctx)
		if err == nil {
			buf.Reset()
			_, err = buf.ReadFrom(r)
		}
		if err != nil {
			if ctx.Err() == nil {
				c.ended.Add(1)
				c.endedWhy.Store(closeReason(err), struct{}{})
			}
			return
		}
		b := buf.Bytes()
		if !bytes.Contains(b, decisionMark) {
			continue
		}
		now := time.Now()
		id := decisionID(b)
		v.mu.Lock()
		v.got[id] = now
		v.mu.Unlock()
		c.received.Add(1)
	}
}

func closeReason(err error) string {
	if s := websocket.CloseStatus(err); s != -1 {
		return fmt.Sprintf("close %d", s)
	}
	return err.Error()
}

// decisionID finds the "id" of a decision message (the server encodes it as a
// plain UUID string, no escapes needed).
func decisionID(b []byte) string {
	i := bytes.Index(b, idMark)
	if i < 0 {
		return ""
	}
	rest := b[i+len(idMark):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// measureFanOut connects --viewers viewers to one window of a fresh server
// process, measures the server's memory per idle viewer, then times --checks
// checks from the moment each is sent until every viewer has its decision.
func measureFanOut(ctx context.Context, e *env) error {
	o := e.o
	progress("  the floor: one frame to %d raw TCP sockets, %d times", o.viewers, floorRounds)
	floor, err := measureFloor(ctx, e, o.viewers)
	if err != nil {
		return fmt.Errorf("the floor: %w", err)
	}
	srv, err := startServer(ctx, e.dir, e.redisURL, "--policy", fanPolicy, "--tick-interval", o.tickInterval.String())
	if err != nil {
		return err
	}
	defer srv.stop()
	if err := sleep(ctx, settle); err != nil {
		return err
	}
	before, err := srv.metrics(mHeap, mRSS, mGoroutines)
	if err != nil {
		return err
	}

	key := fmt.Sprintf("fan-%d", time.Now().UnixNano())
	vctx, cancel := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer func() { cancel(); readers.Wait() }()
	c := &crowd{viewers: make([]*viewer, o.viewers)}
	progress("  connecting %d viewers", o.viewers)
	dialStart := time.Now()
	if err := c.connect(vctx, "ws://"+srv.addr+"/ws?policy=fan&key="+key, &readers); err != nil {
		return err
	}
	dialTook := time.Since(dialStart)
	progress("  connected in %s", dialTook.Round(time.Millisecond))
	idleMeter := newCPUMeter(srv, e.redis)
	if err := sleep(ctx, idle); err != nil {
		return err
	}
	idleCPU := idleMeter.stop()
	after, err := srv.metrics(mHeap, mRSS, mGoroutines, mViewers)
	if err != nil {
		return err
	}

	progress("  timing %d checks", o.checks)
	meter := newCPUMeter(srv, e.redis)
	t, err := c.timeChecks(ctx, o, "http://"+srv.addr+"/api/v1/check?policy=fan&key="+key)
	if err != nil {
		return err
	}
	cpu := meter.stop()
	end, err := srv.metrics(mDropped, mViewers)
	if err != nil {
		return err
	}

	n := float64(o.viewers)
	heapPer := (after[mHeap] - before[mHeap]) / n / 1024
	rssPer := (after[mRSS] - before[mRSS]) / n / 1024
	lastP99 := t.last.sorted().pct(.99)
	rep := e.rep
	rep.line("")
	rep.line("## WebSocket fan-out: %d viewers on one window", o.viewers)
	rep.line("")
	rep.line("coder/websocket clients in the load tool's process, each reading its stream continuously (ticks, snapshots, decisions); the server in its own process with `--policy %s --tick-interval %s`. %d checks, one at a time, at least %s apart; each is timed from just before its POST until a viewer has read the decision with its id.",
		fanPolicy, o.tickInterval, o.checks, o.checkInterval)
	rep.line("")
	rep.line("- connected in %s (%.0f viewers/s, %d dialers); the server counted %.0f viewers when idle, %.0f after the checks",
		dialTook.Round(time.Millisecond), n/dialTook.Seconds(), dialers, after[mViewers], end[mViewers])
	rep.line("- CPU with the viewers idle (ticks and snapshots only): %s", idleCPU)
	rep.line("- CPU while timing the checks: %s", cpu)
	rep.line("")
	rep.line("| check → decision | p50 | p90 | p99 | max |")
	rep.line("|---|---:|---:|---:|---:|")
	rep.line("| the last viewer to get it (one value per check) | %s |", t.last.cells())
	rep.line("| any viewer (every delivery, %d of them) | %s |", len(t.each), t.each.cells())
	rep.line("| the floor: a %d-byte write to each of %d plain loopback TCP sockets (a goroutine each), read by another process; no WebSocket, no server (%d rounds) | %s |", floorFrame, o.viewers, floorRounds, floor.sorted().cells())
	rep.line("")
	rep.line("| measure | value |")
	rep.line("|---|---|")
	rep.line("| checks timed / answered without a decision | %d / %d%s |", len(t.last), o.checks-len(t.last), statusCounts(t.undecided))
	rep.line("| deliveries missing after %s | %d of %d |", deliveryTimeout, t.missing, len(t.last)*o.viewers)
	rep.line("| viewers dropped as slow (server's `%s`) | %.0f |", mDropped, end[mDropped])
	rep.line("| viewers whose stream ended early (client side) | %d%s |", c.ended.Load(), c.reasons())
	rep.line("| server heap in use per idle viewer | %.1f KB (%.1f → %.1f MB) |", heapPer, before[mHeap]/1e6, after[mHeap]/1e6)
	rep.line("| server RSS per idle viewer | %.1f KB (%.1f → %.1f MB) |", rssPer, before[mRSS]/1e6, after[mRSS]/1e6)
	rep.line("| server goroutines per viewer | %.2f (%.0f → %.0f) |", (after[mGoroutines]-before[mGoroutines])/n, before[mGoroutines], after[mGoroutines])
	rep.line("")
	rep.line("- memory per idle viewer ≤ 64 KB: heap %s, RSS %s", atMost(heapPer, 64), atMost(rssPer, 64))
	if len(t.last) == 0 {
		rep.line("- no check was decided, so no delivery was timed")
	} else if o.viewers >= 10000 {
		rep.line("- at %d viewers, the last viewer's p99 ≤ 100 ms: %s (%s)", o.viewers, atMost(float64(lastP99.Milliseconds()), 100), ms(lastP99))
	} else {
		rep.line("- the 100 ms target is for 10,000 viewers (`--viewers 10000`); here the last viewer's p99 is %s", ms(lastP99))
	}
	return nil
}

// connect dials every viewer from a few dialers at once and starts its reader.
func (c *crowd) connect(ctx context.Context, url string, readers *sync.WaitGroup) error {
	client := &http.Client{Timeout: 10 * time.Second} // bounds each handshake only
	var next atomic.Int64
	var once sync.Once
	var dialErr error
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range dialers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(c.viewers)) && dctx.Err() == nil; i = next.Add(1) - 1 {
				conn, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: client})
				if err != nil {
					once.Do(func() { dialErr = fmt.Errorf("failed to connect viewer %d: %w", i+1, err) })
					cancel()
					return
				}
				conn.SetReadLimit(1 << 20)
				v := &viewer{got: make(map[string]time.Time)}
				c.viewers[i] = v
				readers.Go(func() { c.read(ctx, conn, v) })
			}
		})
	}
	wg.Wait()
	if dialErr != nil {
		return dialErr
	}
	return ctx.Err()
}

// statusCounts gives " (10 × 503)" for checks answered without a decision.
func statusCounts(m map[int]int) string {
	if len(m) == 0 {
		return ""
	}
	return " (" + statuses(m) + ")"
}

func (c *crowd) reasons() string {
	var why []string
	c.endedWhy.Range(func(k, _ any) bool { why = append(why, k.(string)); return true })
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%q)", why)
}

// timing is what timeChecks measured.
type timing struct {
	last    latencies // per check: until the last viewer had it
	each    latencies // per delivery
	missing int       // deliveries that did not arrive within deliveryTimeout
	// undecided counts, by HTTP status, checks that were not allowed and so
	// have no decision id to follow.
	undecided map[int]int
}

// timeChecks sends the checks one at a time. Only these checks decide on this
// window, so a check is complete when the decision count has grown by one per
// viewer still connected; each viewer's arrival time is then read by id.
func (c *crowd) timeChecks(ctx context.Context, o options, checkURL string) (timing, error) {
	t := timing{undecided: map[int]int{}}
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for k := range o.checks {
		r0 := c.received.Load()
		t0 := time.Now()
		id, status, err := sendCheck(ctx, client, checkURL)
		if err != nil {
			return t, fmt.Errorf("failed to send check %d: %w", k+1, err)
		}
		if id == "" {
			// No decision, nothing to time; the report counts it.
			t.undecided[status]++
			progress("  check %d: answered %d without a decision", k+1, status)
			if err := sleep(ctx, time.Until(t0.Add(o.checkInterval))); err != nil {
				return t, err
			}
			continue
		}
		deadline := t0.Add(deliveryTimeout)
		for c.received.Load()-r0 < int64(len(c.viewers))-c.ended.Load() && time.Now().Before(deadline) {
			if err := sleep(ctx, 200*time.Microsecond); err != nil {
				return t, err
			}
		}
		var worst time.Duration
		for _, v := range c.viewers {
			v.mu.Lock()
			at, ok := v.got[id]
			delete(v.got, id)
			v.mu.Unlock()
			if !ok {
				t.missing++
				continue
			}
			d := at.Sub(t0)
			t.each = append(t.each, d)
			worst = max(worst, d)
		}
		t.last = append(t.last, worst)
		if (k+1)%10 == 0 {
			progress("  %d checks: the last viewer had check %d after %s", k+1, k+1, ms(worst))
		}
		if err := sleep(ctx, time.Until(t0.Add(o.checkInterval))); err != nil {
			return t, err
		}
	}
	return t, nil
}

// sendCheck posts one check and returns the id of its decision, or "" and
// the status when it was not allowed (say, 503: the server could not reach a
// decision within its check timeout).
func sendCheck(ctx context.Context, client *http.Client, url string) (id string, status int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var d struct {
		Allowed bool   `json:"allowed"`
		ID      string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return "", resp.StatusCode, fmt.Errorf("failed to read the answer (%s): %w", resp.Status, err)
	}
	if !d.Allowed || d.ID == "" {
		return "", resp.StatusCode, nil
	}
	return d.ID, resp.StatusCode, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
