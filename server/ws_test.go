package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// viewer is a WebSocket client of /ws that decodes every message.
type viewer struct {
	viewers atomic.Int64 // the latest viewers count received
	t       testing.TB
	conn    *websocket.Conn
	msgs    chan map[string]any
	err     chan error
}

func watch(t testing.TB, app *apptest.App, query string, opts *websocket.DialOptions) *viewer {
	t.Helper()
	return watchAt(t, app, "/ws", query, opts)
}

// watchAt opens the stream at path (/ws or /ws/lab).
func watchAt(t testing.TB, app *apptest.App, path, query string, opts *websocket.DialOptions) *viewer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://"+app.Addr+path+"?"+query, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn.SetReadLimit(1 << 22)
	v := &viewer{t: t, conn: conn, msgs: make(chan map[string]any, 4096), err: make(chan error, 1)}
	go func() {
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				v.err <- err
				close(v.msgs)
				return
			}
			frame, err := decodeFrame(b)
			if err != nil {
				v.err <- err
				close(v.msgs)
				return
			}
			for _, m := range frame {
				if m["type"] == "viewers" {
					v.viewers.Store(int64(m["count"].(float64)))
				}
				v.msgs <- m
			}
		}
	}()
	t.Cleanup(func() { conn.CloseNow() })
	return v
}

// decodeFrame reads a text frame: one message object, or a JSON array of them.
func decodeFrame(b []byte) ([]map[string]any, error) {
	if len(b) > 0 && b[0] == '[' {
		var ms []map[string]any
		if err := json.Unmarshal(b, &ms); err != nil || len(ms) < 2 {
			return nil, fmt.Errorf("not a JSON array of two or more messages: %q", b)
		}
		return ms, nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("not JSON: %q", b)
	}
	return []map[string]any{m}, nil
}

// next returns the next message of type typ (skipping others), or fails.
func (v *viewer) next(typ string, match func(map[string]any) bool) map[string]any {
	v.t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case m, ok := <-v.msgs:
			if !ok {
				v.t.Fatalf("stream ended while waiting for %s: %v", typ, <-v.err)
			}
			if m["type"] == typ && (match == nil || match(m)) {
				return m
			}
		case <-deadline:
			v.t.Fatalf("no %s message within 15s", typ)
		}
	}
}

func TestStreamMessages(t *testing.T) {
	app := startApp(t, nil, "--tick-interval", "50ms")
	key := newKey()
	v := watch(t, app, "policy=demo&key="+key, nil)

	hello := <-v.msgs
	if hello["type"] != "hello" || hello["key"] != key || hello["policy"] != "demo" || hello["tickMs"] != 50.0 || hello["instance"] == "" {
		t.Fatalf("first message %v", hello)
	}
	if rules := hello["rules"].([]any); len(rules) != 1 || rules[0].(map[string]any)["limit"] != 5.0 || rules[0].(map[string]any)["windowMs"] != 10000.0 {
		t.Fatalf("hello rules %v", hello["rules"])
	}
	if st := <-v.msgs; st["type"] != "status" || st["redis"] != "up" {
		t.Fatalf("second message %v", st)
	}
	snap := v.next("snapshot", nil)
	if snap["count"] != 0.0 || len(snap["entries"].([]any)) != 0 || snap["limit"] != 5.0 || snap["windowMs"] != 10000.0 {
		t.Fatalf("snapshot %v", snap)
	}
	if vw := v.next("viewers", nil); vw["count"] != 1.0 {
		t.Fatalf("viewers %v", vw)
	}
	t1 := v.next("tick", nil)["nowMs"].(float64)
	t2 := v.next("tick", nil)["nowMs"].(float64)
	if t2 <= t1 || t1 < float64(time.Now().Add(-time.Minute).UnixMilli()) {
		t.Fatalf("ticks %v then %v", t1, t2)
	}

	r := do(t, "POST", app.URL+"/api/v1/check?policy=demo&key="+key, "")
	id := r.body["id"].(string)
	d := v.next("decision", nil)
	if d["id"] != id || d["allowed"] != true || d["count"] != 1.0 || d["limit"] != 5.0 || d["key"] != key ||
		d["nowMs"] != r.body["nowMs"] || d["retryAfterMs"] != 0.0 || d["instance"] != hello["instance"] {
		t.Fatalf("decision %v for %s", d, r.raw)
	}
	snap = v.next("snapshot", func(m map[string]any) bool { return m["count"] == 1.0 })
	if e := snap["entries"].([]any); len(e) != 1 || e[0].(map[string]any)["id"] != id {
		t.Fatalf("snapshot after the check %v", snap)
	}

	if r := do(t, "DELETE", app.URL+"/api/v1/window?policy=demo&key="+key, ""); r.status != 204 {
		t.Fatalf("reset %d", r.status)
	}
	if rs := v.next("reset", nil); rs["key"] != key || rs["policy"] != "demo" || rs["nowMs"].(float64) < t1 {
		t.Fatalf("reset %v", rs)
	}
	v.next("snapshot", func(m map[string]any) bool { return m["count"] == 0.0 })

	// Another viewer of the same window raises the count for both.
	w2 := watch(t, app, "policy=demo&key="+key, nil)
	w2.next("viewers", func(m map[string]any) bool { return m["count"] == 2.0 })
	v.next("viewers", func(m map[string]any) bool { return m["count"] == 2.0 })
	w2.conn.Close(websocket.StatusNormalClosure, "")
	v.next("viewers", func(m map[string]any) bool { return m["count"] == 1.0 })
}

func TestStreamRejects(t *testing.T) {
	app := startApp(t, nil, "--allowed-origins", "https://teach.example.org,*.school.test", "--policy", "login=5/1m")
	for _, tc := range []struct {
		query, origin string
		status        int
	}{
		{"key=a%20b&policy=demo", "", 400},
		{"policy=demo", "", 400},
		{"key=a&policy=nope", "", 400},
		{"key=a&policy=demo", "https://evil.example.com", 403},
		{"key=a&policy=demo", "null", 403},
	} {
		r := do(t, "GET", app.URL+"/ws?"+tc.query, "", "Origin", tc.origin, "Connection", "Upgrade", "Upgrade", "websocket",
			"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		if r.status != tc.status || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s origin %q: %d %s", tc.query, tc.origin, r.status, r.raw)
		}
	}
	for _, origin := range []string{"https://teach.example.org", "https://a.school.test", "http://" + app.Addr} {
		v := watch(t, app, "key=a&policy=demo", &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {origin}}})
		v.next("hello", nil)
	}

	// The stream is server to client: a data frame from the client closes it with 1008.
	v := watch(t, app, "key=a&policy=demo", nil)
	v.next("hello", nil)
	if err := v.conn.Write(context.Background(), websocket.MessageText, []byte(`{"hi":1}`)); err != nil {
		t.Fatal(err)
	}
	for range v.msgs {
	}
	if err := <-v.err; websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("closed with %v, want 1008", err)
	}
}

func TestStreamShutdownSends1001(t *testing.T) {
	app := startApp(t, nil)
	v := watch(t, app, "key=a&policy=demo", nil)
	v.next("hello", nil)
	if err := app.Stop(); err != nil {
		t.Fatal(err)
	}
	for range v.msgs {
	}
	if err := <-v.err; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("closed with %v, want 1001", err)
	}
}

// TestCrossInstance runs two servers on one Redis: a check on A reaches a
// viewer on B, and viewer counts add up across both.
func TestCrossInstance(t *testing.T) { crossInstance(t, redistest.URL(t)) }

// TestClusterCrossInstance is the same on a real three-node Redis Cluster
// (the embedded Redis has no cluster mode: skipped without redis-server).
func TestClusterCrossInstance(t *testing.T) { crossInstance(t, redistest.StartCluster(t).URL) }

func crossInstance(t *testing.T, url string) {
	a := startApp(t, map[string]string{"REDIS_URL": url})
	b := startApp(t, map[string]string{"REDIS_URL": url})
	key := newKey()
	onB := watch(t, b, "policy=demo&key="+key, nil)
	helloB := onB.next("hello", nil)
	onA := watch(t, a, "policy=demo&key="+key, nil)
	helloA := onA.next("hello", nil)
	if helloA["instance"] == helloB["instance"] {
		t.Fatal("both servers have one instance id")
	}
	onB.next("viewers", func(m map[string]any) bool { return m["count"] == 2.0 })
	onA.next("viewers", func(m map[string]any) bool { return m["count"] == 2.0 })

	// Presence travels asynchronously: A publishes decisions for B's viewers
	// once it has heard of them, so check until one arrives.
	deadline := time.Now().Add(10 * time.Second)
	var d map[string]any
	for d == nil {
		do(t, "POST", a.URL+"/api/v1/check?policy=demo&key="+key, "")
		timeout := time.After(300 * time.Millisecond)
	wait:
		for {
			select {
			case m := <-onB.msgs:
				if m["type"] == "decision" {
					d = m
					break wait
				}
			case <-timeout:
				break wait
			}
		}
		if d == nil && time.Now().After(deadline) {
			t.Fatal("no decision from A reached the viewer on B")
		}
	}
	if d["instance"] != helloA["instance"] || d["key"] != key {
		t.Fatalf("decision on B: %v", d)
	}
	do(t, "DELETE", a.URL+"/api/v1/window?policy=demo&key="+key, "")
	onB.next("reset", func(m map[string]any) bool { return m["key"] == key })

	onA.conn.Close(websocket.StatusNormalClosure, "")
	onB.next("viewers", func(m map[string]any) bool { return m["count"] == 1.0 })
}

// TestSlowViewerDropped: a viewer that stops reading is disconnected when its
// buffer fills, while another viewer of the same window keeps receiving.
func TestSlowViewerDropped(t *testing.T) {
	// A generous check timeout: on a loaded machine (-race) a check that misses
	// the default 150 ms is a 503 with no decision to wait for.
	app := startApp(t, nil, "--tick-interval", "10ms", "--policy", "bulk=100000/1h", "--check-timeout", "5s")
	key := newKey()
	// Large snapshots fill the slow viewer's socket quickly.
	for range 3 {
		if r := do(t, "POST", app.URL+"/api/v1/check?policy=bulk&cost=400&key="+key, ""); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.raw)
		}
	}
	fast := watch(t, app, "policy=bulk&key="+key, nil)
	fast.next("hello", nil)

	// The slow viewer's socket has a tiny receive buffer and it never reads.
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slow, _, err := websocket.Dial(ctx, "ws://"+app.Addr+"/ws?policy=bulk&key="+key, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.CloseNow()
	fast.next("viewers", func(m map[string]any) bool { return m["count"] == 2.0 })

	deadline := time.Now().Add(30 * time.Second)
	decisions := 0
	for {
		r := do(t, "POST", app.URL+"/api/v1/check?policy=bulk&key="+key, "")
		if r.status != 200 {
			t.Fatalf("check %d answered %d %s", decisions+1, r.status, r.raw)
		}
		fast.next("decision", func(m map[string]any) bool { return m["id"] == r.body["id"] })
		decisions++
		if fast.viewers.Load() == 1 {
			t.Logf("slow viewer dropped after %d checks; the fast one got every decision", decisions)
			for !strings.Contains(metrics(t, app), "ratescope_ws_dropped_slow_total 1") {
				if time.Now().After(deadline) {
					t.Fatalf("the drop was not counted as a slow viewer:\n%s", app.Logs()[max(0, len(app.Logs())-3000):])
				}
				time.Sleep(50 * time.Millisecond)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow viewer was never dropped")
		}
	}
}

func metrics(t testing.TB, app *apptest.App) string {
	t.Helper()
	resp, err := http.Get(app.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if errors.Is(err, context.Canceled) || err != nil {
			break
		}
	}
	return b.String()
}
