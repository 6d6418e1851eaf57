package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// TestOverviewWhoMaySee: the top lists name clients, so with an admin token
// configured a non-demo policy's overview (API and stream) needs it — the
// API token is not enough — while demo's is open; an unknown policy is a 400
// naming policy.
func TestOverviewWhoMaySee(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm", "RATESCOPE_API_TOKEN": "api"}, "--policy", "api=5/1m")
	admin := []string{"Authorization", "Bearer adm"}
	for _, c := range []struct {
		query  string
		header []string
		status int
	}{
		{"policy=demo", nil, 200},
		{"", nil, 200}, // demo by default
		{"policy=api", nil, 401},
		{"policy=api", []string{"Authorization", "Bearer api"}, 401},
		{"policy=api", []string{"Authorization", "Bearer wrong"}, 401},
		{"policy=api", admin, 200},
		{"policy=nope", admin, 400},
		{"policy=demo&policy=api", admin, 400},
	} {
		r := do(t, "GET", app.URL+"/api/v1/overview?"+c.query, "", c.header...)
		if r.status != c.status {
			t.Errorf("GET /api/v1/overview?%s %v: %d, want %d: %s", c.query, c.header, r.status, c.status, r.raw)
			continue
		}
		switch c.status {
		case 401:
			if r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s: 401 without WWW-Authenticate", c.query)
			}
		case 400:
			if !strings.Contains(r.raw, `"field":"policy"`) {
				t.Errorf("%s: 400 not naming policy: %s", c.query, r.raw)
			}
		}
		// The stream answers the same before upgrading.
		x := call(t, "GET", app.URL+"/ws/overview?"+c.query, "", append(withHeaders(wsUpgrade), c.header...)...)
		want := c.status
		if want == 200 {
			want = http.StatusSwitchingProtocols
		}
		if x.status != want {
			t.Errorf("GET /ws/overview?%s %v: %d, want %d", c.query, c.header, x.status, want)
		}
	}

	// Without an admin token the API token's rule applies, as for a window.
	open := startApp(t, map[string]string{"RATESCOPE_API_TOKEN": "api"}, "--policy", "api=5/1m")
	if r := do(t, "GET", open.URL+"/api/v1/overview?policy=api", ""); r.status != 401 {
		t.Errorf("no admin token, API token configured, none sent: %d, want 401", r.status)
	}
	if r := do(t, "GET", open.URL+"/api/v1/overview?policy=api", "", "Authorization", "Bearer api"); r.status != 200 {
		t.Errorf("no admin token, the API token sent: %d, want 200", r.status)
	}
}

// TestOverviewStream: /ws/overview sends the overview at once and then once
// a second, its top lists following the traffic.
func TestOverviewStream(t *testing.T) {
	app := startApp(t, nil, "--policy", "api=3/1m")
	v := watchAt(t, app, "/ws/overview", "policy=api", nil)
	first := v.next("overview", nil)
	if first["policy"] != "api" {
		t.Fatalf("first overview: %v", first)
	}
	start := time.Now()
	for range 5 {
		do(t, "POST", app.URL+"/api/v1/check?policy=api&key=streamed", "")
	}
	m := v.next("overview", func(m map[string]any) bool {
		rows := m["top"].(map[string]any)["denied"].([]any)
		return len(rows) == 1 && rows[0].(map[string]any)["key"] == "streamed" && rows[0].(map[string]any)["denied"] == 2.0
	})
	if checks := m["top"].(map[string]any)["checks"].([]any)[0].(map[string]any)["checks"]; checks != 5.0 {
		t.Errorf("streamed has %v checks, want 5: %v", checks, m)
	}
	// Then once a second: five more within a generous bound.
	n := 0
	for n < 5 {
		v.next("overview", nil)
		n++
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("six overviews in %v: more than one a second", took)
	}
}

// TestOverviewPublishesOnlyWhileWatched: instances exchange their counts over
// Pub/Sub only while someone watches an overview — a viewer on either
// instance — and stop soon after the last one leaves.
func TestOverviewPublishesOnlyWhileWatched(t *testing.T) {
	url := redistest.URL(t)
	a := startApp(t, map[string]string{"REDIS_URL": url}, "--policy", "api=100/1m")
	b := startApp(t, map[string]string{"REDIS_URL": url}, "--policy", "api=100/1m")
	heard := listenOverview(t, url)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // steady traffic on both instances throughout
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, app := range []*apptest.App{a, b} {
				resp, err := http.Post(fmt.Sprintf("%s/api/v1/check?policy=api&key=k%d", app.URL, i%7), "", nil)
				if err == nil {
					resp.Body.Close()
				}
			}
		}
	}()
	defer func() { close(stop); <-done }()

	time.Sleep(3 * time.Second)
	if n := heard.Load(); n != 0 {
		t.Fatalf("%d overview messages on Redis with nobody watching", n)
	}

	v := watchAt(t, b, "/ws/overview", "policy=api", nil)
	v.next("overview", func(m map[string]any) bool { return m["instances"] == 2.0 })
	if heard.Load() == 0 {
		t.Fatal("both instances merged with no message on Redis")
	}
	v.conn.Close(websocket.StatusNormalClosure, "")

	// The wants expire within a few seconds; then silence again.
	waitFor(t, 20*time.Second, "the overview's messages stop once nobody watches", func() bool {
		before := heard.Load()
		time.Sleep(2 * time.Second)
		return heard.Load() == before
	})
}

// listenOverview counts the messages on the overview's channel of the Redis
// at url (database 0).
func listenOverview(t *testing.T, url string) *atomic.Int64 {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	ps := rdb.Subscribe(context.Background(), "ratescope:overview:db0")
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for range ps.Channel() {
			n.Add(1)
		}
	}()
	t.Cleanup(func() { ps.Close() })
	return &n
}
