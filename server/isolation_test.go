package server_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestDatabasesAreIsolated runs two deployments on databases 0 and 1 of one
// redis-server, two instances each, all watching the same window: what
// happens on database 1 — decisions, a reset, a race, its viewers — reaches
// database 1's viewers and nothing of database 0's, and database 1's reset
// leaves database 0's cached denial in place; events still cross between the
// instances of one database. On a real redis-server (skipped without one).
func TestDatabasesAreIsolated(t *testing.T) {
	rs := redistest.Start(t)
	on := func(db string) string { return "redis://" + rs.Addr + "/" + db }
	a, a2 := startApp(t, map[string]string{"REDIS_URL": on("0")}), startApp(t, map[string]string{"REDIS_URL": on("0")})
	b, b2 := startApp(t, map[string]string{"REDIS_URL": on("1")}), startApp(t, map[string]string{"REDIS_URL": on("1")})
	key := newKey()
	q := "policy=demo&key=" + key
	va, vb, vb2 := watch(t, a, q, nil), watch(t, b, q, nil), watch(t, b2, q, nil)
	instanceB := vb.next("hello", nil)["instance"]
	vb2.next("hello", nil)

	// What database 0's viewer receives, all of it, from here on.
	var mu sync.Mutex
	var seenByA []map[string]any
	maxViewersA := 0.0
	fromA2 := make(chan struct{})
	go func() {
		once := sync.Once{}
		for m := range va.msgs {
			mu.Lock()
			seenByA = append(seenByA, m)
			if m["type"] == "viewers" {
				maxViewersA = max(maxViewersA, m["count"].(float64))
			}
			mu.Unlock()
			if m["type"] == "decision" && m["instance"] != instanceB && m["allowed"] == false {
				once.Do(func() { close(fromA2) })
			}
		}
	}()

	check := func(app string) response { return do(t, "POST", app+"/api/v1/check?"+q, "") }
	fill := func(app string) {
		t.Helper()
		for range 10 {
			if check(app).status == 429 {
				return
			}
		}
		t.Fatalf("%s: 10 checks of demo all allowed", app)
	}
	fill(a.URL)
	if r := check(a.URL); r.status != 429 || r.body["cached"] != true {
		t.Fatalf("database 0's instance does not answer from its deny cache: %d %s", r.status, r.raw)
	}

	// Database 1: decisions, a reset and a race on the same key and policy,
	// once its instances know of each other's viewers.
	waitFor(t, 10*time.Second, "database 1's viewers count each other", func() bool { return vb.viewers.Load() == 2 })
	fill(b.URL)
	if r := do(t, "DELETE", b.URL+"/api/v1/window?"+q, ""); r.status != 204 {
		t.Fatalf("reset on database 1: %d %s", r.status, r.raw)
	}
	if r := raceOnce(t, b.URL, key, "atomic", `,"requests":10`); r.status != 200 {
		t.Fatalf("race on database 1: %d %s", r.status, r.raw)
	}
	vb2.next("decision", func(m map[string]any) bool { return m["instance"] == instanceB })
	vb2.next("reset", nil)
	vb2.next("race", nil)

	// Database 0 still hears its own: a denial on its other instance. Redis
	// delivered database 1's events before it, so any that leaked have come.
	if r := check(a2.URL); r.status != 429 {
		t.Fatalf("database 0's second instance: %d %s", r.status, r.raw)
	}
	select {
	case <-fromA2:
	case <-time.After(10 * time.Second):
		t.Fatal("database 0's viewer did not get the decision of database 0's other instance")
	}
	time.Sleep(1500 * time.Millisecond) // viewer counts are sent once a second
	if r := check(a.URL); r.status != 429 || r.body["cached"] != true {
		t.Fatalf("database 1's reset cleared database 0's cached denial: %d %s", r.status, r.raw)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, m := range seenByA {
		switch {
		case m["type"] == "reset", m["type"] == "race",
			m["type"] == "decision" && m["instance"] == instanceB:
			t.Errorf("database 0's viewer got database 1's %s: %v", m["type"], m)
		}
	}
	if maxViewersA > 1 {
		t.Errorf("database 0's viewer was told of %v viewers; it is the only one there", maxViewersA)
	}
}
