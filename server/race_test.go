package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

func raceOnce(t *testing.T, url, key, mode string, extra string) response {
	t.Helper()
	return do(t, "POST", url+"/api/v1/race", fmt.Sprintf(`{"key":%q,"mode":%q%s}`, key, mode, extra))
}

// TestRaceAtomicIsExact: 20 races of 200 concurrent checks each allow exactly
// the limit.
func TestRaceAtomicIsExact(t *testing.T) {
	app := startApp(t, nil)
	key := newKey()
	for run := range 20 {
		r := raceOnce(t, app.URL, key, "atomic", "")
		if r.status != 200 || num(t, r, "allowed") != 5 || num(t, r, "denied") != 195 || num(t, r, "requests") != 200 ||
			num(t, r, "limit") != 5 || num(t, r, "overshoot") != 0 || r.body["policy"] != "demo" || r.body["key"] != key {
			t.Fatalf("run %d: %d %s", run, r.status, r.raw)
		}
	}
	w := do(t, "GET", app.URL+"/api/v1/window?policy=demo&key="+key, "")
	if num(t, w, "count") != 5 {
		t.Fatalf("window after the races: %s", w.raw)
	}
}

// TestRaceNaiveOvershoots: with a think time long enough for every request to
// read before any writes, naive lets all of them through; each request waits
// the think time between its read and its write (SPEC §6), so the race lasts
// at least that long.
func TestRaceNaiveOvershoots(t *testing.T) {
	app := startApp(t, nil)
	key := newKey()
	for run := range 3 {
		r := raceOnce(t, app.URL, key, "naive", `,"requests":100,"thinkMs":400`)
		if r.status != 200 || num(t, r, "allowed") != 100 || num(t, r, "overshoot") != 95 || num(t, r, "limit") != 5 {
			t.Fatalf("run %d: %d %s", run, r.status, r.raw)
		}
		if d := num(t, r, "durationMs"); d < 400 {
			t.Fatalf("run %d lasted %d ms: the writes did not wait thinkMs 400 after the reads", run, d)
		}
	}
	// The default think time makes it certain too.
	if r := raceOnce(t, app.URL, key, "naive", ""); r.status != 200 || num(t, r, "overshoot") <= 0 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
}

func TestRaceBadInput(t *testing.T) {
	app := startApp(t, nil, "--policy", "login=5/1m")
	for _, tc := range []struct{ body, field string }{
		{`{"mode":"atomic"}`, "key"},
		{`{"key":"a b","mode":"atomic"}`, "key"},
		{`{"key":"a"}`, "mode"},
		{`{"key":"a","mode":"fast"}`, "mode"},
		{`{"key":"a","mode":"naive","requests":0}`, "requests"},
		{`{"key":"a","mode":"naive","requests":501}`, "requests"},
		{`{"key":"a","mode":"naive","requests":"x"}`, "requests"},
		{`{"key":"a","mode":"naive","thinkMs":1001}`, "thinkMs"},
		{`{"key":"a","mode":"naive","thinkMs":-1}`, "thinkMs"},
		{`{"key":"a","mode":"atomic","policy":"login"}`, "policy"},
	} {
		r := do(t, "POST", app.URL+"/api/v1/race", tc.body)
		if r.status != 400 || !strings.Contains(r.raw, `"field":"`+tc.field+`"`) {
			t.Errorf("%s: %d %s", tc.body, r.status, r.raw)
		}
	}
	if r := do(t, "GET", app.URL+"/api/v1/race", ""); r.status != 405 {
		t.Errorf("GET: %d", r.status)
	}
}

// TestRaceConflict: a second race on a window where one runs gets 409. Redis
// stops answering (behind a paused proxy) so the first one cannot finish
// before the second arrives.
func TestRaceConflict(t *testing.T) {
	rs := redistest.StartProxy(t, redistest.URL(t))
	app := startApp(t, map[string]string{"REDIS_URL": rs.URL})
	key := newKey()
	rs.Pause()
	statuses := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := http.Post(app.URL+"/api/v1/race", "application/json", strings.NewReader(`{"key":"`+key+`","mode":"atomic"}`))
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	if first := <-statuses; first != 409 {
		t.Fatalf("first answer %d, want 409 (the other race is stuck on the paused Redis)", first)
	}
	rs.Resume()
	if second := <-statuses; second != 200 {
		t.Fatalf("the running race answered %d", second)
	}
}

// TestRaceReachesViewers: viewers get a race message and then a snapshot of
// the result, and no decision message per race check.
func TestRaceReachesViewers(t *testing.T) {
	app := startApp(t, nil)
	key := newKey()
	v := watch(t, app, "policy=demo&key="+key, nil)
	v.next("snapshot", nil)
	r := raceOnce(t, app.URL, key, "atomic", `,"requests":50`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	deadline := time.After(15 * time.Second)
	sawRace := false
	for {
		select {
		case m := <-v.msgs:
			switch m["type"] {
			case "decision":
				t.Fatalf("race checks must not send decisions: %v", m)
			case "race":
				for _, k := range []string{"mode", "requests", "allowed", "denied", "limit", "overshoot", "durationMs", "key", "policy"} {
					if m[k] != r.body[k] {
						t.Fatalf("race message %s = %v, answer %v", k, m[k], r.body[k])
					}
				}
				sawRace = true
			case "snapshot":
				if sawRace && m["count"] == 5.0 {
					if len(m["entries"].([]any)) != 5 {
						t.Fatalf("snapshot %v", m)
					}
					return
				}
			}
		case <-deadline:
			t.Fatalf("no race message and snapshot (saw race: %v)", sawRace)
		}
	}
}
