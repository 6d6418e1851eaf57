package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// Readiness bounds (SPEC §10): off within 3 s of Redis refusing writes, on
// again within 5 s of it accepting them.
const (
	readyOffWithin = 3 * time.Second
	readyOnWithin  = 5 * time.Second
)

// readyAs polls /readyz and gRPC health until they say status and redis
// (and SERVING or NOT_SERVING with it), failing after within; it returns how
// long that took.
func readyAs(t *testing.T, app *apptest.App, hc healthpb.HealthClient, status int, redis string, within time.Duration) time.Duration {
	t.Helper()
	want := healthpb.HealthCheckResponse_SERVING
	if status != 200 {
		want = healthpb.HealthCheckResponse_NOT_SERVING
	}
	start := time.Now()
	var last response
	var grpcLast healthpb.HealthCheckResponse_ServingStatus
	for {
		last = do(t, "GET", app.URL+"/readyz", "")
		httpOK := last.status == status && last.body["redis"] == redis
		grpcOK := true
		if hc != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err != nil {
				t.Fatalf("gRPC health: %v", err)
			}
			grpcLast = r.GetStatus()
			grpcOK = grpcLast == want
		}
		took := time.Since(start)
		if httpOK && grpcOK {
			return took
		}
		if took > within {
			t.Fatalf("readiness not %d redis=%q (gRPC %v) within %v: /readyz %d %s, gRPC %v",
				status, redis, want, within, last.status, last.raw, grpcLast)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fillUntilOOM fills rs past a maxmemory it then sets below what Redis
// uses, under noeviction: every write is refused with OOM, reads still work.
func fillUntilOOM(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.Eval(ctx, `for i = 1, 5000 do redis.call('SET', 'fill:' .. i, string.rep('x', 200)) end return 1`, nil).Err(); err != nil {
		t.Fatal(err)
	}
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	used, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", fmt.Sprint(used / 2)}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadinessFollowsWrites: /readyz and gRPC health turn 503/NOT_SERVING
// within 3 s of Redis refusing the limiter's writes — full under
// noeviction (OOM), or turned replica (READONLY) — naming the error in the
// body, and 200/SERVING within 5 s of it accepting them again. Under the
// fail mode open every check still gets an answer, so readiness stays 200
// and only names the error. On a real redis-server (skipped without one).
func TestReadinessFollowsWrites(t *testing.T) {
	redistest.Need(t, "redis-server")
	faults := []struct {
		name, word  string
		break_, fix func(t *testing.T, rdb *redis.Client)
	}{
		{"oom", "oom", fillUntilOOM, func(t *testing.T, rdb *redis.Client) {
			if err := rdb.ConfigSet(context.Background(), "maxmemory", "0").Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"readonly", "readonly", func(t *testing.T, rdb *redis.Client) {
			port, err := redistest.FreePort() // a master that never answers: the data stays
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.SlaveOf(context.Background(), "127.0.0.1", strconv.Itoa(port)).Err(); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, rdb *redis.Client) {
			if err := rdb.SlaveOf(context.Background(), "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, f := range faults {
		for _, mode := range []string{"closed", "open"} {
			if f.name == "readonly" && mode == "open" {
				continue // one fail-open case is enough
			}
			t.Run(f.name+"/"+mode, func(t *testing.T) {
				rs := redistest.Start(t)
				rdb := rs.Client()
				app := startApp(t, map[string]string{"REDIS_URL": rs.URL}, "--grpc-addr", "127.0.0.1:0", "--fail-mode", mode)
				hc := healthpb.NewHealthClient(grpcConn(t, app))
				readyAs(t, app, hc, 200, "up", readyOnWithin)
				check := app.URL + "/api/v1/check?policy=demo&key=" + newKey()

				f.break_(t, rdb)
				status := 503
				if mode == "open" {
					status = 200
				}
				took := readyAs(t, app, hc, status, f.word, readyOffWithin)
				t.Logf("%s: readiness named it after %v", f.name, took.Round(time.Millisecond))
				if r := do(t, "POST", check, ""); mode == "closed" && r.status != 503 {
					t.Fatalf("a check while Redis refuses writes: %d %s, want 503", r.status, r.raw)
				}

				f.fix(t, rdb)
				took = readyAs(t, app, hc, 200, "up", readyOnWithin)
				t.Logf("%s fixed: ready again after %v", f.name, took.Round(time.Millisecond))
				if r := do(t, "POST", check, ""); r.status != 200 || r.body["failOpen"] != nil {
					t.Fatalf("a check once Redis accepts writes: %d %s", r.status, r.raw)
				}
			})
		}
	}
}

// TestReadinessFollowsChecks: when the limiter's checks fail while the
// probe still writes — here an ACL user that may write the probe's key but
// not the windows' — readiness turns off within 3 s, named by the checks'
// error, and on again once checks succeed. On a real redis-server.
func TestReadinessFollowsChecks(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client()
	ctx := context.Background()
	user := func(keys string) {
		t.Helper()
		if err := rdb.Do(ctx, "ACL", "SETUSER", "limiter", "on", ">pw", "resetkeys", keys, "allchannels", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
	}
	user("~*")
	url := strings.Replace(rs.URL, "redis://", "redis://limiter:pw@", 1)
	app := startApp(t, map[string]string{"REDIS_URL": url})
	readyAs(t, app, nil, 200, "up", readyOnWithin)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // checks keep coming, as they would in production
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if resp, err := http.Post(app.URL+"/api/v1/check?policy=demo&key="+newKey(), "", nil); err == nil {
				resp.Body.Close()
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	user("~ratescope:ready")
	took := readyAs(t, app, nil, 503, "noperm", readyOffWithin)
	t.Logf("checks failing: readiness off after %v", took.Round(time.Millisecond))
	user("~*")
	took = readyAs(t, app, nil, 200, "up", readyOnWithin)
	t.Logf("checks succeeding: readiness on after %v", took.Round(time.Millisecond))
}
