package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
)

// TestSnapshotBudgetBoundsRedisReads: 300 anonymous viewers, each on a
// window of its own holding 1,000 entries of an open policy, want 300 full
// snapshots a second (300,000 entries). With --snapshot-budget 50000 Redis
// is asked for about 50 a second — the rate is read from Redis itself (INFO
// commandstats: a full window's read calls ZRANGEBYSCORE twice) — and
// checks beside them, on watched windows and others, all answer 200 or 429.
// With no budget the same viewers cost every read, every second.
func TestSnapshotBudgetBoundsRedisReads(t *testing.T) {
	const (
		windows = 300
		entries = 1000
		budget  = 50_000
		measure = 4 * time.Second
	)
	rs := redistest.Start(t)
	rdb := rs.Client()
	fillWindows(t, rdb, "open", windows, entries)
	app := startApp(t, map[string]string{"REDIS_URL": rs.URL}, "--policy", "open=100000/1h",
		"--snapshot-budget", strconv.Itoa(budget))
	crowd := openCrowdAt(t, app.Addr, windows, 64, func(i int) string { return fmt.Sprintf("/ws?policy=open&key=full-%d", i) })
	time.Sleep(1500 * time.Millisecond) // the viewers' first snapshots are paid for

	stop := make(chan struct{})
	checked := make(chan map[int]int)
	go func() {
		statuses := map[int]int{}
		for i := 0; ; i++ {
			select {
			case <-stop:
				checked <- statuses
				return
			default:
			}
			q := "policy=open&key=full-" + strconv.Itoa(i%windows) // watched: their snapshots are due too
			if i%2 == 1 {
				q = "policy=demo&key=beside-" + strconv.Itoa(i%7)
			}
			statuses[do(t, "POST", app.URL+"/api/v1/check?"+q, "").status]++
			time.Sleep(5 * time.Millisecond)
		}
	}()
	before, start := rangeCalls(t, rdb), time.Now()
	time.Sleep(measure)
	after, took := rangeCalls(t, rdb), time.Since(start)
	close(stop)
	statuses := <-checked

	reads := float64(after-before) / 2 / took.Seconds()
	// A generous ceiling: the budget allows ~50 full reads a second (what an
	// idle instance saves and a round's reads counted across the
	// measurement's edges add a few); with none, Redis reads ~300.
	most := 1.5 * budget / (entries + 10)
	t.Logf("%.0f full reads a second over %v (at most %.0f within the budget); checks %v", reads, took, most, statuses)
	if reads > most {
		t.Errorf("Redis read %.0f full windows a second for snapshots, want at most %.0f (--snapshot-budget %d)", reads, most, budget)
	}
	for status, n := range statuses {
		if status != http.StatusOK && status != http.StatusTooManyRequests {
			t.Errorf("%d checks beside the viewers answered %d, want 200 or 429", n, status)
		}
	}
	if statuses[http.StatusOK] == 0 {
		t.Errorf("no check was allowed: %v", statuses)
	}
	if n := crowd.ended.Load(); n > 0 {
		t.Errorf("%d viewers lost their stream, e.g. %v", n, crowd.firstEnd.Load())
	}
}

// fillWindows gives n windows full-0… of policy entries entries each, inside
// the last minute, straight into Redis.
func fillWindows(t *testing.T, rdb *redis.Client, policy string, n, entries int) {
	t.Helper()
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms := now.UnixMilli()
	pipe := rdb.Pipeline()
	for i := range n {
		zs := make([]redis.Z, entries)
		for j := range zs {
			zs[j] = redis.Z{Score: float64(ms - 60_000 + int64(j)*50), Member: fmt.Sprintf("e%d-%d", i, j)}
		}
		pipe.ZAdd(ctx, redisdata.LogKey("full-"+strconv.Itoa(i), policy), zs...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

// rangeCalls is how many ZRANGEBYSCORE calls Redis has run (INFO
// commandstats): the snapshot reads' command; checks use ZRANGE.
func rangeCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_zrangebyscore:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}
