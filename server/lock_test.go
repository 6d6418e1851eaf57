package server_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestLockedOutAcrossInstances: a policy with +lock=3s, two instances on one
// Redis. The denial that finds no room locks the key for exactly 3 s on
// Redis's clock: both instances answer 429 "locked" with the same level
// until the lock's end and 200 from it on; the next lock within a day is
// twice as long (level 2); a reset clears the lock and its history.
func TestLockedOutAcrossInstances(t *testing.T) {
	url := redistest.URL(t)
	env := map[string]string{"REDIS_URL": url, "RATESCOPE_ADMIN_TOKEN": "adm"}
	apps := []string{
		startApp(t, env, "--policy", "lk=2/1s+lock=3s").URL,
		startApp(t, env, "--policy", "lk=2/1s+lock=3s").URL,
	}
	key := newKey()
	check := func(i int) response {
		t.Helper()
		r := do(t, "POST", apps[i]+"/api/v1/check?policy=lk&key="+key, "")
		if r.status != 200 && r.status != 429 {
			t.Fatalf("check on instance %d: %d %s", i, r.status, r.raw)
		}
		return r
	}
	lock := func(level int64) (until int64) {
		t.Helper()
		for i := range 10 {
			r := check(i % 2)
			if r.status == 200 {
				continue
			}
			now, retry := num(t, r, "nowMs"), num(t, r, "retryAfterMs")
			want := int64(3000) << (level - 1)
			if r.body["locked"] != true || num(t, r, "lockLevel") != level || retry != want {
				t.Fatalf("the denial that locks: %s; want locked, level %d, retryAfterMs %d", r.raw, level, want)
			}
			return now + want
		}
		t.Fatal("10 checks allowed on 2/1s")
		return 0
	}
	// waitOut polls both instances until the lock ends; every answer before
	// is a locked 429 of that lock, the first 200 comes at or after its end.
	waitOut := func(until, level int64) {
		t.Helper()
		var lastLocked int64
		for i := 0; ; i++ {
			r := check(i % 2)
			now := num(t, r, "nowMs")
			if r.status == 200 {
				if lastLocked >= until || now < until {
					t.Fatalf("allowed at %d (last locked at %d), lock until %d", now, lastLocked, until)
				}
				t.Logf("level %d: locked until %d ms before its end, allowed %d ms after it", level, until-lastLocked, now-until)
				if now-lastLocked > 250 {
					t.Errorf("the lock's end seen %d ms apart: the answers around it were slow", now-lastLocked)
				}
				return
			}
			if r.body["locked"] != true || num(t, r, "lockLevel") != level || now+num(t, r, "retryAfterMs") != until || r.header.Get("Retry-After") == "" {
				t.Fatalf("a check at %d during the lock until %d: %s", now, until, r.raw)
			}
			lastLocked = now
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitOut(lock(1), 1)
	waitOut(lock(2), 2)
	if r := do(t, "DELETE", apps[1]+"/api/v1/window?policy=lk&key="+key, "", "Authorization", "Bearer adm"); r.status != 204 {
		t.Fatalf("reset: %d %s", r.status, r.raw)
	}
	var wg sync.WaitGroup
	for i := range apps {
		wg.Go(func() {
			if r := check(i); r.status != 200 {
				t.Errorf("instance %d after the reset: %s", i, r.raw)
			}
		})
	}
	wg.Wait()
	lock(1)
}
