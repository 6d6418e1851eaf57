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

	"github.com/ratescope/ratescope/internal/bus"
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
	// decisionMark finds decision messages without decoding every tick; a
	// decision's "id" comes after its type.
	decisionMark = []byte(`"type":"` + bus.TypeDecision + `"`)
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
		for id, rest, ok := nextDecision(b); ok; id, rest, ok = nextDecision(rest) {
			v.mu.Lock()
			v.got[id] = now
			v.mu.Unlock()
			c.received.Add(1)
		}
	}
}

func closeReason(err error) string {
	if s := websocket.CloseStatus(err); s != -1 {
		return fmt.Sprintf("close %d", s)
	}
	return err.Error()
}

// nextDecision finds the first decision message in b — a frame holds one message
// or an array of them — and returns its "id" (the server encodes it as a plain
// UUID string: no escapes) and the rest of b after it.
func nextDecision(b []byte) (id string, rest []byte, ok bool) {
	i := bytes.Index(b, decisionMark)
	if i < 0 {
		return "", nil, false
	}
	b = b[i+len(decisionMark):]
	j := bytes.Index(b, idMark)
	if j < 0 {
		return "", nil, false
	}
	b = b[j+len(idMark):]
	k := bytes.IndexByte(b, '"')
	if k < 0 {
		return "", nil, false
	}
	return string(b[:k]), b[k:], true
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
