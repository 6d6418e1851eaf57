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

// TestRaceOutcomeModes: for failed logins, "peek, then record the failure"
// lets many more than the limit reach the handler — every peek sees room
// before any failure is recorded — while "check (reserving), then keep the
// entry of the failure" lets exactly the limit through, race after race.
// The answer says so, and the window holds the limit either way.
func TestRaceOutcomeModes(t *testing.T) {
	app := startApp(t, map[string]string{"REDIS_URL": redistest.RealURL(t)})
	key := newKey()
	v := watch(t, app, "policy=demo&key="+key, nil)
	for run := range 3 {
		r := raceOnce(t, app.URL, key, "peekrecord", "")
		if r.status != 200 || r.body["mode"] != "peekrecord" || num(t, r, "requests") != 200 || num(t, r, "limit") != 5 ||
			num(t, r, "allowed") <= 5 || num(t, r, "overshoot") != num(t, r, "allowed")-5 || num(t, r, "allowed")+num(t, r, "denied") != 200 {
			t.Fatalf("peekrecord run %d: %d %s", run, r.status, r.raw)
		}
		if n := windowCount(t, app, "demo", key); n != 5 {
			t.Fatalf("peekrecord run %d: the window holds %d, want the 5 failures it could record", run, n)
		}
		m := v.next("race", func(m map[string]any) bool { return m["mode"] == "peekrecord" })
		if m["allowed"] != r.body["allowed"] {
			t.Fatalf("race message %v, answer %s", m, r.raw)
		}
	}
	for run := range 5 {
		r := raceOnce(t, app.URL, key, "reserverefund", "")
		if r.status != 200 || r.body["mode"] != "reserverefund" || num(t, r, "allowed") != 5 || num(t, r, "denied") != 195 ||
			num(t, r, "overshoot") != 0 {
			t.Fatalf("reserverefund run %d: %d %s", run, r.status, r.raw)
		}
		if n := windowCount(t, app, "demo", key); n != 5 {
			t.Fatalf("reserverefund run %d: the window holds %d, want 5", run, n)
		}
		v.next("race", func(m map[string]any) bool { return m["mode"] == "reserverefund" && m["allowed"] == 5.0 })
	}
	// The handler's think time is part of each request: a race lasts at least that long.
	if r := raceOnce(t, app.URL, key, "reserverefund", `,"requests":20,"thinkMs":300`); r.status != 200 || num(t, r, "durationMs") < 300 {
		t.Fatalf("reserverefund with thinkMs 300: %d %s", r.status, r.raw)
	}
}

func TestRaceBadInput(t *testing.T) {
	app := startApp(t, nil, "--policy", "login=5/1m")
	for _, tc := range []struct{ body, field string }{
		{`{"mode":"atomic"}`, "key"},
		{`{"key":"a b","mode":"atomic"}`, "key"},
		{`{"key":"a"}`, "mode"},
		{`{"key":"a","mode":"fast"}`, "mode"},
		{`{"key":"a","mode":"peek"}`, "mode"},
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
	if r := do(t, "POST", app.URL+"/api/v1/race", `{"key":"a","mode":"fast"}`); !strings.Contains(r.raw, "naive, atomic, peekrecord or reserverefund") {
		t.Errorf("the mode's problem does not list the four modes: %s", r.raw)
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

// TestRaceBounded: with Redis stopped, or paused so that nothing answers, a
// race answers 503 within its think time + 2 s (a second more allowed for a
// loaded machine) instead of hanging. On a real redis-server (skipped
// without one).
func TestRaceBounded(t *testing.T) {
	const slack = 2*time.Second + time.Second
	rs := redistest.Start(t)
	proxy := redistest.StartProxy(t, rs.URL)
	app := startApp(t, map[string]string{"REDIS_URL": proxy.URL})
	for _, fault := range []string{"paused", "stopped"} {
		for _, mode := range []string{"naive", "atomic", "peekrecord", "reserverefund"} {
			switch fault {
			case "paused":
				proxy.Pause()
			case "stopped":
				proxy.Resume()
				rs.Stop()
			}
			const thinkMs = 300
			start := time.Now()
			r := raceOnce(t, app.URL, newKey(), mode, fmt.Sprintf(`,"thinkMs":%d`, thinkMs))
			took := time.Since(start)
			t.Logf("Redis %s, %s race: %d after %v", fault, mode, r.status, took.Round(time.Millisecond))
			if r.status != 503 || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("Redis %s, %s race: %d %v %s, want 503", fault, mode, r.status, r.header, r.raw)
			}
			if took > thinkMs*time.Millisecond+slack {
				t.Fatalf("Redis %s, %s race: answered after %v, want within thinkMs + 2 s", fault, mode, took)
			}
		}
	}
}

// TestRaceOnePerClient: while a client address runs a race, its next race
// (on another window) gets 429 with Retry-After: 1 as a problem document;
// another client's race runs; once the first ends the client may race again.
func TestRaceOnePerClient(t *testing.T) {
	app := startApp(t, nil, "--trusted-proxies", "127.0.0.1/32")
	key := newKey()
	v := watch(t, app, "policy=demo&key="+key, nil)
	v.next("snapshot", nil)
	first := make(chan response, 1)
	go func() { // three naive requests, each thinking for a second
		first <- raceOnce(t, app.URL, key, "naive", `,"requests":3,"thinkMs":1000`)
	}()
	v.next("reset", nil) // the race has started: it resets its window first

	r := raceOnce(t, app.URL, newKey(), "atomic", `,"requests":10`)
	if r.status != 429 || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/problem+json" || num(t, r, "status") != 429 {
		t.Fatalf("a second race of the same client: %d %v %s, want 429 with Retry-After: 1", r.status, r.header, r.raw)
	}
	other := do(t, "POST", app.URL+"/api/v1/race", fmt.Sprintf(`{"key":%q,"mode":"atomic","requests":10}`, newKey()), "X-Forwarded-For", "10.1.2.3")
	if other.status != 200 {
		t.Fatalf("another client's race: %d %s", other.status, other.raw)
	}
	if r := <-first; r.status != 200 {
		t.Fatalf("the first race: %d %s", r.status, r.raw)
	}
	if r := raceOnce(t, app.URL, newKey(), "atomic", `,"requests":10`); r.status != 200 {
		t.Fatalf("the client's next race, once the first ended: %d %s", r.status, r.raw)
	}
}
