package server_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

// afterPromotion bounds how long checks may fail once the sentinels have
// promoted a replica.
const afterPromotion = 5 * time.Second

// scriptCalls is how many scripts clients sent the node at addr.
func scriptCalls(t *testing.T, addr string) int64 {
	t.Helper()
	n, err := redistest.ScriptCalls(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// promoted waits until some sentinel names a master other than old.
func promoted(t *testing.T, d *redistest.Sentinels, old string) time.Time {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, v := range d.Views(context.Background()) {
			if v != "" && v != old {
				return time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no sentinel promoted a replica of %s within 30s\n%s", old, d.SentinelLogs(20))
	return time.Time{}
}

// checkUntilOK checks until one answers 200 and returns when that was.
func checkUntilOK(t *testing.T, url string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := do(t, "POST", url+"&key="+newKey(), "")
		if r.status == http.StatusOK {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("checks still fail after %v: %d %s", within, r.status, r.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSentinelFailover: with a Sentinel URL, checks succeed again within 5 s
// of a promotion after the master is killed, /readyz is 503 while no master
// accepts writes and 200 after, and the old master, restarted empty once the
// sentinels have moved, never receives a check.
func TestSentinelFailover(t *testing.T) {
	d := redistest.StartDeployment(t, redistest.DeploymentConfig{})
	app := startApp(t, map[string]string{"REDIS_URL": d.URL}, "--check-timeout", "1s", "--policy", "api=1000/10s")
	check := app.URL + "/api/v1/check?policy=api"
	checkUntilOK(t, check, 10*time.Second)
	if !strings.Contains(app.Logs(), "using Redis Sentinel") {
		t.Fatalf("no log line names Sentinel:\n%s", app.Logs())
	}

	readyAs(t, app, nil, 200, "up", readyOnWithin)

	old := d.Master()
	d.Kill(old)
	// While no master accepts writes, the instance is not ready.
	readyAs(t, app, nil, 503, "down", readyOffWithin)
	promotedAt := promoted(t, d, old)
	back := checkUntilOK(t, check, afterPromotion)
	t.Logf("checks succeed again %v after the promotion", back.Sub(promotedAt).Round(time.Millisecond))
	readyAs(t, app, nil, 200, "up", readyOnWithin)

	d.WaitMoved(old)
	d.Restart(old)
	for range 50 {
		if r := do(t, "POST", check+"&key="+newKey(), ""); r.status != http.StatusOK {
			t.Fatalf("a check after the restart: %d %s", r.status, r.raw)
		}
	}
	if n := scriptCalls(t, old); n != 0 {
		t.Fatalf("the restarted old master received %d scripts", n)
	}
}

// TestSentinelRestartDuringFailover: the master is killed and, once the
// sentinels have begun to fail it over but before they promote the replica,
// it comes back empty on its port — where they still name it. Checks made
// meanwhile never reach it (the fail mode answers them), and after the
// promotion checks succeed on the new master.
func TestSentinelRestartDuringFailover(t *testing.T) {
	d := redistest.StartDeployment(t, redistest.DeploymentConfig{})
	app := startApp(t, map[string]string{"REDIS_URL": d.URL}, "--check-timeout", "1s", "--policy", "api=1000/10s")
	check := app.URL + "/api/v1/check?policy=api"
	checkUntilOK(t, check, 10*time.Second)
	old := d.Master()
	d.Kill(old)
	waitFor(t, 30*time.Second, "a sentinel to begin the failover", func() bool {
		return slices.ContainsFunc(d.Flags(context.Background()), func(f string) bool {
			return strings.Contains(f, "failover_in_progress")
		})
	})
	d.Restart(old)
	restarted := time.Now()
	for {
		r := do(t, "POST", check+"&key="+newKey(), "")
		views := d.Views(context.Background())
		if r.status == http.StatusOK && !slices.Contains(views, old) {
			break
		}
		if time.Since(restarted) > 30*time.Second {
			t.Fatalf("no check succeeded on a new master within 30s of the restart: %d %s; sentinels name %v", r.status, r.raw, views)
		}
	}
	if n := scriptCalls(t, old); n != 0 {
		t.Fatalf("the old master, back empty during the failover, received %d scripts", n)
	}
}

// TestSentinelManualFailover: SENTINEL FAILOVER while checks run on pooled
// connections to the master: checks succeed again within 5 s of the
// promotion, and once the old master has become a replica (READONLY to any
// write) they still do — no instance is left talking to it.
func TestSentinelManualFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for Sentinel to turn the old master into a replica (~10 s)")
	}
	d := redistest.StartDeployment(t, redistest.DeploymentConfig{})
	app := startApp(t, map[string]string{"REDIS_URL": d.URL}, "--check-timeout", "1s", "--policy", "api=1000/10s")
	check := app.URL + "/api/v1/check?policy=api"
	checkUntilOK(t, check, 10*time.Second)
	old := d.Master()

	// Load on several connections, so the pool holds some to the old master.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var last atomic.Int64 // unix ms of the last failed check
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := http.Post(check+"&key="+newKey(), "", nil)
				if err == nil {
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					last.Store(time.Now().UnixMilli())
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	defer func() { stop(); wg.Wait() }()

	if err := d.Failover(context.Background()); err != nil {
		t.Fatal(err)
	}
	promotedAt := promoted(t, d, old)
	checkUntilOK(t, check, afterPromotion)
	d.WaitMoved(old)
	calls := scriptCalls(t, old)
	oldMaster := d.Client(old)
	waitFor(t, 30*time.Second, "the old master to become a replica", func() bool {
		role, err := oldMaster.Do(context.Background(), "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "slave"
	})
	time.Sleep(time.Second)
	if f := last.Load(); f > promotedAt.Add(afterPromotion).UnixMilli() {
		t.Fatalf("a check failed %v after the promotion", time.UnixMilli(f).Sub(promotedAt).Round(time.Millisecond))
	}
	if n := scriptCalls(t, old) - calls; n != 0 {
		t.Fatalf("the old master received %d scripts after the sentinels moved", n)
	}
}
