package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
)

// logScores reads the scores of key's log under policy, oldest first.
func logScores(t testing.TB, url, key, policy string) []int64 {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	zs, err := c.ZRangeWithScores(context.Background(), redisdata.LogKey(key, policy), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(zs))
	for i, z := range zs {
		out[i] = int64(z.Score)
	}
	return out
}

// fullest is the most scores (sorted) any window (T - w, T] holds.
func fullest(scores []int64, w int64) int {
	most, j := 0, 0
	for i, s := range scores {
		for scores[j] <= s-w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// heldCheck is a check with wait whose answer comes later: its status and
// body, or the error of a request that gave up.
type heldCheck struct {
	done   chan struct{}
	status int
	body   map[string]any
	err    error
}

func checkLater(ctx context.Context, client *http.Client, u string) *heldCheck {
	h := &heldCheck{done: make(chan struct{})}
	go func() {
		defer close(h.done)
		req, err := http.NewRequestWithContext(ctx, "POST", u, nil)
		if err != nil {
			h.err = err
			return
		}
		h.status, h.body, h.err = callJSONReq(client, req)
	}()
	return h
}

// TestWaitServedInOrder: 100 checks with wait=30s on 10/1s, through two
// instances, all at once: every one is answered 200 — ten a second, each
// held until the slot it booked — in the order Redis took them (a later
// check never gets an earlier slot), and no 1-s window of the log ever
// holds more than 10 entries.
func TestWaitServedInOrder(t *testing.T) {
	const n, limit = 100, 10
	url := redistest.RealURL(t)
	env := map[string]string{"REDIS_URL": url}
	a, b := startApp(t, env, "--policy", fmt.Sprintf("q=%d/1s", limit)), startApp(t, map[string]string{"REDIS_URL": url}, "--policy", fmt.Sprintf("q=%d/1s", limit))
	key := newKey()
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	t.Cleanup(client.CloseIdleConnections)
	checks := make([]*heldCheck, n)
	for i := range n {
		app := []*apptest.App{a, b}[i%2]
		checks[i] = checkLater(context.Background(), client, app.URL+"/api/v1/check?policy=q&wait=30s&key="+key)
		time.Sleep(2 * time.Millisecond) // started in order
	}
	type answer struct{ now, booked, waited int64 }
	var got []answer
	for i, h := range checks {
		<-h.done
		if h.err != nil || h.status != 200 || h.body["allowed"] != true {
			t.Fatalf("check %d: %d %v %v", i, h.status, h.body, h.err)
		}
		an := answer{now: int64(h.body["nowMs"].(float64))}
		if v, ok := h.body["bookedMs"].(float64); ok {
			an.booked = int64(v)
			an.waited = int64(h.body["waitedMs"].(float64))
			if an.waited < an.booked-an.now {
				t.Fatalf("check %d was held %d ms, answered before its slot %d ms after its check", i, an.waited, an.booked-an.now)
			}
		} else if _, ok := h.body["waitedMs"]; ok {
			t.Fatalf("check %d booked nothing but says it waited: %v", i, h.body)
		}
		got = append(got, an)
	}
	// First come, first served: in the order Redis ran the checks, the
	// slots (or now, for those allowed at once) never go back.
	slices.SortStableFunc(got, func(x, y answer) int { return int(x.now - y.now) })
	var last int64
	booked := 0
	for i, an := range got {
		at := max(an.now, an.booked)
		if at < last {
			t.Fatalf("the %d-th check Redis ran (at %d) got slot %d, before an earlier check's %d", i, an.now, at, last)
		}
		last = at
		if an.booked > 0 {
			booked++
		}
	}
	if booked < n-2*limit {
		t.Fatalf("%d of %d checks booked a slot, want at least %d", booked, n, n-2*limit)
	}
	// Ten a second: the last slot is at least 9 s after the first check.
	if span := last - got[0].now; span < (n/limit-1)*1000 {
		t.Fatalf("100 checks served over %d ms, want at least 9 s at 10/1s", span)
	}
	scores := logScores(t, url, key, "q")
	if len(scores) < n-limit { // the first ones may have slid out by now
		t.Fatalf("the log holds %d entries, want the %d checks' (or all but the oldest)", len(scores), n)
	}
	if most := fullest(scores, 1000); most > limit {
		t.Fatalf("a 1-s window of the log holds %d entries, limit %d", most, limit)
	}
}

// TestWaitAbandoned: a client that goes away before its slot loses its
// booking — its entry leaves the log at once, counted in
// ratescope_waits_abandoned_total, and viewers see a refund — and a new
// check with wait takes that very slot.
func TestWaitAbandoned(t *testing.T) {
	url := redistest.RealURL(t)
	app := startApp(t, map[string]string{"REDIS_URL": url}, "--policy", "ab=2/2s")
	key := newKey()
	v := watch(t, app, "policy=ab&key="+key, nil)
	v.next("snapshot", nil)
	u := app.URL + "/api/v1/check?policy=ab&key=" + key
	for range 2 {
		if r := do(t, "POST", u, ""); r.status != 200 {
			t.Fatalf("a check with room: %d %s", r.status, r.raw)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := checkLater(ctx, http.DefaultClient, u+"&wait=30s")
	booking := v.next("decision", func(m map[string]any) bool { return m["bookedMs"] != nil })
	slot := int64(booking["bookedMs"].(float64))
	if s := logScores(t, url, key, "ab"); len(s) != 3 || s[2] != slot {
		t.Fatalf("while held, the log's scores: %v, want 3 with the last at the slot %d", s, slot)
	}
	// The window API (and a snapshot, the same read) shows the booking
	// ahead of now: every entry after now - window.
	w := do(t, "GET", app.URL+"/api/v1/window?policy=ab&key="+key, "")
	if es, _ := w.body["entries"].([]any); len(es) != 3 || int64(es[2].(map[string]any)["ms"].(float64)) != slot || num(t, w, "nowMs") >= slot {
		t.Fatalf("the window while held: %s, want the booking at %d among its entries", w.raw, slot)
	}
	cancel()
	<-gone.done
	v.next("adjustment", func(m map[string]any) bool { return m["id"] == booking["id"] })
	if s := logScores(t, url, key, "ab"); len(s) != 2 {
		t.Fatalf("after the client went away, the log's scores: %v, want its booking gone", s)
	}
	waitFor(t, 5*time.Second, "waits_abandoned_total 1", func() bool {
		return strings.Contains(metrics(t, app), "ratescope_waits_abandoned_total 1\n")
	})
	r := do(t, "POST", u+"&wait=30s", "")
	if r.status != 200 || num(t, r, "bookedMs") != slot || num(t, r, "waitedMs") < slot-num(t, r, "nowMs") {
		t.Fatalf("a new check with wait: %d %s, want 200 booked at the freed slot %d", r.status, r.raw, slot)
	}
	if m := metrics(t, app); !strings.Contains(m, "ratescope_waits_served_total 1\n") || !strings.Contains(m, "ratescope_waiters_held 0\n") {
		t.Fatalf("metrics after one wait served:\n%s", grepLines(m, "wait"))
	}
}

// TestWaitRefusedAtOnce: a retry beyond the wait is denied at once with
// nothing recorded; with every place to hold a check taken
// (--max-waiters) a check that would wait is denied at once too, nothing
// booked, and counted.
func TestWaitRefusedAtOnce(t *testing.T) {
	url := redistest.RealURL(t)
	app := startApp(t, map[string]string{"REDIS_URL": url}, "--policy", "rf=1/5s", "--max-waiters", "1")
	key := newKey()
	u := app.URL + "/api/v1/check?policy=rf&key=" + key
	if r := do(t, "POST", u, ""); r.status != 200 {
		t.Fatalf("a check with room: %d %s", r.status, r.raw)
	}
	start := time.Now()
	r := do(t, "POST", u+"&wait=1s", "")
	if r.status != 429 || r.body["bookedMs"] != nil || time.Since(start) > 900*time.Millisecond {
		t.Fatalf("a wait shorter than the retry: %d %s after %v, want 429 at once", r.status, r.raw, time.Since(start))
	}
	if s := logScores(t, url, key, "rf"); len(s) != 1 {
		t.Fatalf("a refused wait recorded: the log's scores %v", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := checkLater(ctx, http.DefaultClient, u+"&wait=30s")
	waitFor(t, 5*time.Second, "one check held", func() bool { return len(logScores(t, url, key, "rf")) == 2 })
	start = time.Now()
	if r := do(t, "POST", u+"&wait=30s", ""); r.status != 429 || time.Since(start) > 4*time.Second {
		t.Fatalf("a check that would wait beyond --max-waiters: %d %s after %v, want 429 at once", r.status, r.raw, time.Since(start))
	}
	if s := logScores(t, url, key, "rf"); len(s) != 2 {
		t.Fatalf("a check refused for --max-waiters recorded: the log's scores %v", s)
	}
	if m := metrics(t, app); !strings.Contains(m, "ratescope_waits_refused_total 1\n") || !strings.Contains(m, "ratescope_waiters_held 1\n") {
		t.Fatalf("metrics with one held, one refused:\n%s", grepLines(m, "wait"))
	}
	cancel()
	<-held.done
}

// TestWaitBadInput: a malformed wait, or one beyond 30s, is a 400 naming
// wait; a wait on a policy that is no log is a 409 naming wait.
func TestWaitBadInput(t *testing.T) {
	app := startApp(t, nil, "--policy", "bk=5/1s@bucket")
	key := newKey()
	for _, c := range []struct{ query, body string }{
		{"wait=abc", ""}, {"wait=31s", ""}, {"wait=-1s", ""}, {"wait=5", ""}, {"wait=1s&wait=2s", ""},
		{"", `{"wait":5}`}, {"", `{"wait":"1h"}`},
	} {
		r := do(t, "POST", app.URL+"/api/v1/check?policy=demo&key="+key+"&"+c.query, c.body)
		if r.status != 400 || !strings.Contains(r.raw, `"field":"wait"`) {
			t.Errorf("%s %s: %d %s, want 400 naming wait", c.query, c.body, r.status, r.raw)
		}
	}
	r := do(t, "POST", app.URL+"/api/v1/check?policy=bk&wait=1s&key="+key, "")
	if r.status != 409 || !strings.Contains(r.raw, `"field":"wait"`) || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("wait on a bucket policy: %d %s, want 409 naming wait", r.status, r.raw)
	}
	if r := do(t, "POST", app.URL+"/api/v1/check?policy=bk&wait=0s&key="+key, ""); r.status != 200 {
		t.Fatalf("wait=0s on a bucket policy: %d %s, want an ordinary check", r.status, r.raw)
	}
}

// TestWaitRedisDownWhileHolding: a check held for its slot while Redis stops
// accepting writes gets, when its slot comes, the fail mode's answer — 503
// with Retry-After when failing closed, allowed without RateLimit fields
// when failing open — not its booking's; and nothing held leaks.
func TestWaitRedisDownWhileHolding(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		status int
	}{{"closed", 503}, {"open", 200}} {
		t.Run(tc.mode, func(t *testing.T) {
			rs := redistest.Start(t)
			app := startApp(t, map[string]string{"REDIS_URL": rs.URL}, "--policy", "rd=1/6s", "--check-timeout", "300ms", "--fail-mode", tc.mode)
			key := newKey()
			u := app.URL + "/api/v1/check?policy=rd&key=" + key
			// Warm up: the first checks start pools and loops that stay.
			do(t, "POST", app.URL+"/api/v1/check?policy=rd&key=warm", "")
			http.DefaultClient.CloseIdleConnections()
			time.Sleep(200 * time.Millisecond)
			baseline := goleak.IgnoreCurrent()

			if r := do(t, "POST", u, ""); r.status != 200 {
				t.Fatalf("a check with room: %d %s", r.status, r.raw)
			}
			held := checkLater(context.Background(), http.DefaultClient, u+"&wait=30s")
			waitFor(t, 5*time.Second, "the check held", func() bool {
				return strings.Contains(metrics(t, app), "ratescope_waiters_held 1\n")
			})
			rs.Stop()
			// The instance learns of it (readiness) before the slot, ~6 s on.
			waitFor(t, 4*time.Second, "readiness to see Redis down", func() bool {
				return strings.Contains(metrics(t, app), "ratescope_redis_up 0\n")
			})
			<-held.done
			if held.err != nil || held.status != tc.status {
				t.Fatalf("a check held while Redis went away: %d %v %v, want %d", held.status, held.body, held.err, tc.status)
			}
			switch tc.mode {
			case "closed":
				if held.body["status"] != float64(503) || held.body["waitedMs"] != nil {
					t.Fatalf("failing closed at the slot: %v", held.body)
				}
			case "open":
				if held.body["failOpen"] != true || held.body["allowed"] != true || held.body["waitedMs"] != nil {
					t.Fatalf("failing open at the slot: %v", held.body)
				}
			}
			rs.Restart()
			deadline := time.Now().Add(10 * time.Second)
			for do(t, "POST", app.URL+"/api/v1/check?policy=rd&key="+newKey(), "").status != 200 {
				if time.Now().After(deadline) {
					t.Fatal("checks did not recover")
				}
				time.Sleep(50 * time.Millisecond)
			}
			http.DefaultClient.CloseIdleConnections()
			goleak.VerifyNone(t, baseline, goleak.IgnoreAnyFunction("github.com/ratescope/ratescope/internal/redistest.(*Process).launch.func1"))
		})
	}
}

// callJSONReq is callJSON for a request of the caller's (with its context).
func callJSONReq(client *http.Client, req *http.Request) (int, map[string]any, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %d: %w", req.Method, req.URL, resp.StatusCode, err)
	}
	return resp.StatusCode, out, nil
}
