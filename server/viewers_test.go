package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// TestViewerCaps: behind a trusted proxy each forwarded client may open 3
// streams and the instance 5, on /ws and /ws/lab alike; beyond either the
// upgrade is refused with 503, a problem document and Retry-After: 5, and
// counted; a viewer that leaves makes room.
func TestViewerCaps(t *testing.T) {
	app := startApp(t, nil, "--trusted-proxies", "127.0.0.1", "--max-viewers", "5", "--max-viewers-per-client", "3")
	from := func(client string) *websocket.DialOptions {
		return &websocket.DialOptions{HTTPHeader: http.Header{"X-Forwarded-For": {client}}}
	}
	a1 := watch(t, app, "policy=demo&key="+newKey(), from("10.0.0.1"))
	watchAt(t, app, "/ws/lab", "lab="+newLab(), from("10.0.0.1"))
	watch(t, app, "policy=demo&key="+newKey(), from("10.0.0.1"))
	refused(t, app, "/ws?policy=demo&key="+newKey(), "10.0.0.1", "--max-viewers-per-client")
	refused(t, app, "/ws/lab?lab="+newLab(), "10.0.0.1", "--max-viewers-per-client")

	watch(t, app, "policy=demo&key="+newKey(), from("10.0.0.2"))
	watchAt(t, app, "/ws/lab", "lab="+newLab(), from("10.0.0.2"))
	refused(t, app, "/ws?policy=demo&key="+newKey(), "10.0.0.2", "--max-viewers")
	refused(t, app, "/ws?policy=demo&key="+newKey(), "10.0.0.3", "--max-viewers")

	// One of the first client's viewers leaves: a third client gets its place.
	a1.conn.Close(websocket.StatusNormalClosure, "")
	waitFor(t, 5*time.Second, "a place freed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, _, err := websocket.Dial(ctx, "ws://"+app.Addr+"/ws?policy=demo&key="+newKey(), from("10.0.0.3"))
		if err != nil {
			return false
		}
		t.Cleanup(func() { conn.CloseNow() })
		return true
	})
	m := metrics(t, app)
	for _, line := range []string{`ratescope_ws_refused_total{reason="client"} 2`, `ratescope_ws_refused_total{reason="instance"} `} {
		if !strings.Contains(m, line) {
			t.Errorf("/metrics lacks %q:\n%s", line, grepLines(m, "ws_refused"))
		}
	}
}

// TestViewerCapIgnoresUntrustedForwarding: without trusted proxies the peer is
// the client, whatever X-Forwarded-For it sends.
func TestViewerCapIgnoresUntrustedForwarding(t *testing.T) {
	app := startApp(t, nil, "--max-viewers-per-client", "2")
	for _, fake := range []string{"10.0.0.1", "10.0.0.2"} {
		watch(t, app, "policy=demo&key="+newKey(), &websocket.DialOptions{HTTPHeader: http.Header{"X-Forwarded-For": {fake}}})
	}
	refused(t, app, "/ws?policy=demo&key="+newKey(), "10.0.0.3", "--max-viewers-per-client")
}

// refused asks for a stream at path as the forwarded client and wants it
// refused before any upgrade: 503, Retry-After: 5, a problem document naming
// the cap's flag.
func refused(t *testing.T, app *apptest.App, path, client, flag string) {
	t.Helper()
	req, err := http.NewRequest("GET", app.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "X-Forwarded-For": client,
	} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("%s from %s: %s, want 503", path, client, resp.Status) // a 101's body is the stream
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var doc struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "5" ||
		resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("Upgrade") != "" ||
		json.Unmarshal(b, &doc) != nil || doc.Status != 503 || !strings.Contains(doc.Detail, flag+")") {
		t.Fatalf("%s from %s: %s %v %s, want 503 with Retry-After: 5 and a problem naming %s", path, client, resp.Status, resp.Header, b, flag)
	}
}

// TestViewerCountAcrossInstances: viewers of one window on two instances are
// counted together; when one instance dies without a word its viewers drop
// out of the count within the presence's time to live (3 s).
func TestViewerCountAcrossInstances(t *testing.T) {
	url := redistest.RealURL(t)
	doomed := apptest.StartProcess(t, map[string]string{"REDIS_URL": url}, 0)
	stays := startApp(t, map[string]string{"REDIS_URL": url})
	query := "policy=demo&key=" + newKey()
	v := watch(t, stays, query, nil)
	watch(t, doomed, query, nil)
	watch(t, doomed, query, nil)
	waitFor(t, 10*time.Second, "three viewers counted", func() bool { return v.viewers.Load() == 3 })
	doomed.Kill()
	start := time.Now()
	waitFor(t, 10*time.Second, "the dead instance's viewers forgotten", func() bool { return v.viewers.Load() == 1 })
	t.Logf("the count fell to 1 after %v", time.Since(start))
}

// TestRedisDownNeedsTwoFailedProbes: a Redis that answers nothing for 0.8 s
// (one clock read late past any check timeout) is never reported down to
// viewers; one that stops answering is, within two reads of 1 s each, and
// back up once it answers again.
func TestRedisDownNeedsTwoFailedProbes(t *testing.T) {
	rs := redistest.Start(t)
	app := startApp(t, map[string]string{"REDIS_URL": rs.URL}, "--check-timeout", "150ms")
	v := watch(t, app, "policy=demo&key="+newKey(), nil)
	v.next("status", func(m map[string]any) bool { return m["redis"] == "up" })
	v.next("tick", nil)

	rs.Pause()
	time.Sleep(800 * time.Millisecond)
	rs.Resume()
	// Until ticks have flowed for 2 s after the pause, no "down" may come.
	var flowing time.Time
	deadline := time.After(15 * time.Second)
	for flowing.IsZero() || time.Since(flowing) < 2*time.Second {
		var m map[string]any
		select {
		case m = <-v.msgs:
		case <-deadline:
			t.Fatal("no ticks within 15 s of the pause")
		}
		if m["type"] == "status" && m["redis"] != "up" {
			t.Fatalf("a 0.8 s pause was reported to viewers as redis %v", m["redis"])
		}
		if m["type"] == "tick" && flowing.IsZero() {
			flowing = time.Now()
		}
	}

	rs.Pause()
	paused := time.Now()
	v.next("status", func(m map[string]any) bool { return m["redis"] == "down" })
	t.Logf("reported down %v after Redis stopped answering", time.Since(paused).Round(time.Millisecond))
	if d := time.Since(paused); d < time.Second {
		t.Errorf("reported down after %v, before two clock reads of 1 s could fail", d)
	}
	rs.Resume()
	v.next("status", func(m map[string]any) bool { return m["redis"] == "up" })
}
