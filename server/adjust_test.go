package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// twoInstances starts two servers on one real Redis with the same flags.
func twoInstances(t *testing.T, env map[string]string, args ...string) (a, b *apptest.App) {
	t.Helper()
	url := redistest.RealURL(t)
	with := func() map[string]string {
		e := map[string]string{"REDIS_URL": url}
		for k, v := range env {
			e[k] = v
		}
		return e
	}
	return startApp(t, with(), args...), startApp(t, with(), args...)
}

// checkID checks once and returns the answer's id ("" when denied).
func checkID(t testing.TB, app *apptest.App, policy, key string, cost int, header ...string) string {
	t.Helper()
	r := do(t, "POST", fmt.Sprintf("%s/api/v1/check?policy=%s&key=%s&cost=%d", app.URL, policy, key, cost), "", header...)
	switch {
	case r.status == 200:
		return r.body["id"].(string)
	case r.status == 429:
		return ""
	}
	t.Fatalf("check: %d %s", r.status, r.raw)
	return ""
}

func refundCall(t testing.TB, app *apptest.App, policy, key, id string, header ...string) response {
	t.Helper()
	return do(t, "POST", app.URL+"/api/v1/refund", fmt.Sprintf(`{"key":%q,"policy":%q,"id":%q}`, key, policy, id), header...)
}

func settleCall(t testing.TB, app *apptest.App, policy, key, id string, cost int, header ...string) response {
	t.Helper()
	return do(t, "POST", app.URL+"/api/v1/settle", fmt.Sprintf(`{"key":%q,"policy":%q,"id":%q,"cost":%d}`, key, policy, id, cost), header...)
}

// windowCount is the window's true count, read without consuming.
func windowCount(t testing.TB, app *apptest.App, policy, key string, header ...string) int64 {
	t.Helper()
	r := do(t, "GET", app.URL+"/api/v1/window?policy="+policy+"&key="+key, "", header...)
	if r.status != 200 {
		t.Fatalf("window: %d %s", r.status, r.raw)
	}
	return num(t, r, "count")
}

// wantAdjusted checks an adjustment's answer member by member.
func wantAdjusted(t testing.TB, what string, r response, want map[string]int64) {
	t.Helper()
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: %d %s", what, r.status, r.raw)
	}
	for k, v := range want {
		if got, ok := r.body[k].(float64); !ok || int64(got) != v {
			t.Fatalf("%s: %s = %v, want %d in %s", what, k, r.body[k], v, r.raw)
		}
	}
	if num(t, r, "nowMs") < time.Now().Add(-time.Hour).UnixMilli() {
		t.Fatalf("%s: nowMs in %s", what, r.raw)
	}
}

// TestRefundMakesRoomOnEveryInstance: a refund on one instance frees room
// that the other instance's next check sees at once, although that instance
// had the window's denial cached; a second refund of the same id finds
// nothing and changes nothing; both are counted.
func TestRefundMakesRoomOnEveryInstance(t *testing.T) {
	a, b := twoInstances(t, nil, "--policy", "login=3/1m")
	key := newKey()
	var ids []string
	for range 3 {
		ids = append(ids, checkID(t, a, "login", key, 1))
	}
	// B denies the fourth, then from its deny cache (once its subscription
	// to resets is up: on a loaded machine that may take a moment).
	deniedUntilCached(t, b, "login", key)

	r := refundCall(t, a, "login", key, ids[1])
	wantAdjusted(t, "refund", r, map[string]int64{"refunded": 1, "count": 2, "limit": 3, "remaining": 1})
	if r.body["key"] != key || r.body["policy"] != "login" || r.body["id"] != ids[1] {
		t.Fatalf("refund names another check: %s", r.raw)
	}
	// B drops its cached denial as the refund's announcement arrives (the
	// cache would otherwise deny for the rest of the minute).
	waitFor(t, 3*time.Second, "B allows the check the refund made room for", func() bool {
		return checkID(t, b, "login", key, 1) != ""
	})
	if n := windowCount(t, a, "login", key); n != 3 {
		t.Fatalf("window after refund and one check: %d, want 3", n)
	}
	again := refundCall(t, b, "login", key, ids[1])
	wantAdjusted(t, "the same refund again", again, map[string]int64{"refunded": 0, "count": 3, "remaining": 0})
	never := refundCall(t, b, "login", key, uuid.NewString())
	wantAdjusted(t, "refund of an id never recorded", never, map[string]int64{"refunded": 0, "count": 3})

	for app, want := range map[*apptest.App]string{a: "1", b: "2"} {
		if m := metrics(t, app); !strings.Contains(m, `ratescope_adjustments_total{kind="refund",policy="login"} `+want+"\n") {
			t.Errorf("refunds counted:\n%s", grepLines(m, "adjustments_total"))
		}
	}
}

// TestSettle: a settle to fewer entries takes back the highest-numbered, to
// more adds them even past the limit (a debt the next checks wait out), a
// settle repeated finds what the last one left, and one of an id never
// recorded changes nothing.
func TestSettle(t *testing.T) {
	a, b := twoInstances(t, nil, "--policy", "tokens=5/1m")
	key := newKey()
	id := checkID(t, a, "tokens", key, 2)
	wantAdjusted(t, "settle 2 → 4", settleCall(t, b, "tokens", key, id, 4),
		map[string]int64{"was": 2, "settled": 4, "refunded": 0, "count": 4, "limit": 5, "remaining": 1})
	wantAdjusted(t, "settle 4 → 1", settleCall(t, a, "tokens", key, id, 1),
		map[string]int64{"was": 4, "settled": 1, "refunded": 3, "count": 1, "remaining": 4})
	wantAdjusted(t, "settle 1 → 1", settleCall(t, b, "tokens", key, id, 1),
		map[string]int64{"was": 1, "settled": 1, "refunded": 0, "count": 1})
	for range 3 {
		checkID(t, a, "tokens", key, 1)
	}
	// Four entries; settling the first check to 5 makes eight: a debt of three.
	wantAdjusted(t, "settle 1 → 5", settleCall(t, b, "tokens", key, id, 5),
		map[string]int64{"was": 1, "settled": 5, "count": 8, "limit": 5, "remaining": 0})
	if n := windowCount(t, a, "tokens", key); n != 8 {
		t.Fatalf("window after the debt: %d, want 8", n)
	}
	if got := checkID(t, a, "tokens", key, 1); got != "" {
		t.Fatal("a check allowed while the window owes three")
	}
	wantAdjusted(t, "settle 5 → 0", settleCall(t, a, "tokens", key, id, 0),
		map[string]int64{"was": 5, "settled": 0, "refunded": 5, "count": 3, "remaining": 2})
	wantAdjusted(t, "settle of a settled-to-0 check", settleCall(t, b, "tokens", key, id, 3),
		map[string]int64{"was": 0, "settled": 0, "count": 3})
	wantAdjusted(t, "settle of an id never recorded", settleCall(t, b, "tokens", key, uuid.NewString(), 2),
		map[string]int64{"was": 0, "settled": 0, "refunded": 0, "count": 3})
	if n := windowCount(t, b, "tokens", key); n != 3 {
		t.Fatalf("window at the end: %d, want 3", n)
	}
	for app, want := range map[*apptest.App]string{a: "2", b: "5"} {
		if m := metrics(t, app); !strings.Contains(m, `ratescope_adjustments_total{kind="settle",policy="tokens"} `+want+"\n") {
			t.Errorf("settles counted (want %s):\n%s", want, grepLines(m, "adjustments_total"))
		}
	}
}

// TestAdjustAfterSlidingOut: a refund or settle of a check whose entries
// have left the window finds nothing, twice, and adds nothing back.
func TestAdjustAfterSlidingOut(t *testing.T) {
	a, b := twoInstances(t, nil, "--policy", "brief=3/1s")
	key := newKey()
	id := checkID(t, a, "brief", key, 2)
	waitFor(t, 5*time.Second, "the entries slide out", func() bool { return windowCount(t, a, "brief", key) == 0 })
	for _, app := range []*apptest.App{a, b, a} {
		wantAdjusted(t, "refund after sliding out", refundCall(t, app, "brief", key, id), map[string]int64{"refunded": 0, "count": 0, "remaining": 3})
		wantAdjusted(t, "settle after sliding out", settleCall(t, app, "brief", key, id, 3), map[string]int64{"was": 0, "settled": 0, "count": 0})
	}
	if n := windowCount(t, b, "brief", key); n != 0 {
		t.Fatalf("window: %d entries came back", n)
	}
}

// TestAdjustmentsReachViewersOnEveryInstance: a refund and a settle reach a
// viewer of the window on each instance, as adjustment messages naming the
// instance that answered, each followed by a snapshot that shows it.
func TestAdjustmentsReachViewersOnEveryInstance(t *testing.T) {
	a, b := twoInstances(t, nil)
	key := newKey()
	viewers := []*viewer{watch(t, a, "policy=demo&key="+key, nil), watch(t, b, "policy=demo&key="+key, nil)}
	instances := map[*apptest.App]string{}
	for i, app := range []*apptest.App{a, b} {
		instances[app] = viewers[i].next("hello", nil)["instance"].(string)
		viewers[i].next("snapshot", nil)
	}
	// Each instance learns that the other watches through presence, which
	// takes a moment: until then an event stays on its own instance.
	waitFor(t, 10*time.Second, "both instances see two viewers", func() bool {
		return viewers[0].viewers.Load() == 2 && viewers[1].viewers.Load() == 2
	})
	first, second := checkID(t, a, "demo", key, 1), checkID(t, b, "demo", key, 2)

	r := refundCall(t, a, "demo", key, first)
	wantAdjusted(t, "refund", r, map[string]int64{"refunded": 1, "count": 2})
	s := settleCall(t, b, "demo", key, second, 3)
	wantAdjusted(t, "settle", s, map[string]int64{"was": 2, "settled": 3, "count": 3})
	for i, v := range viewers {
		// The two come from different instances: either may arrive first.
		got := map[any]map[string]any{}
		for len(got) < 2 {
			m := v.next("adjustment", func(m map[string]any) bool { return m["kind"] == "refund" || m["kind"] == "settle" })
			got[m["kind"]] = m
		}
		m := got["refund"]
		want := map[string]any{"key": key, "policy": "demo", "id": first, "was": 1.0, "now": 0.0, "count": 2.0, "limit": 5.0, "instance": instances[a]}
		for k, w := range want {
			if m[k] != w {
				t.Fatalf("viewer %d: refund message %s = %v, want %v: %v", i, k, m[k], w, m)
			}
		}
		if m["nowMs"] != r.body["nowMs"] {
			t.Fatalf("viewer %d: refund message nowMs %v, answer %v", i, m["nowMs"], r.body["nowMs"])
		}
		m = got["settle"]
		want = map[string]any{"id": second, "was": 2.0, "now": 3.0, "count": 3.0, "instance": instances[b]}
		for k, w := range want {
			if m[k] != w {
				t.Fatalf("viewer %d: settle message %s = %v, want %v: %v", i, k, m[k], w, m)
			}
		}
		// A snapshot shows the refunded entry gone and the settled one added.
		v.next("snapshot", func(m map[string]any) bool {
			ids := map[string]bool{}
			for _, e := range m["entries"].([]any) {
				ids[e.(map[string]any)["id"].(string)] = true
			}
			return m["count"] == 3.0 && !ids[first] && ids[second] && ids[second+":1"] && ids[second+":2"]
		})
	}
}
