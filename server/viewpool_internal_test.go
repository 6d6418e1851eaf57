package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/server/redisconn"
)

// TestChecksKeepTheirConnectionsWhenTheLiveViewHasNone: with every
// connection of the live view's Redis pool held (as thousands of viewers
// joining different windows would hold them), checks wired as Run wires
// them are still answered 200 within the check timeout: the live view's
// reads and Pub/Sub go through a client of their own. On a real
// redis-server (skipped without one).
func TestChecksKeepTheirConnectionsWhenTheLiveViewHasNone(t *testing.T) {
	rs := redistest.Start(t)
	log := slog.New(slog.DiscardHandler)
	rdb, views, closeRedis, err := redisconn.ConnectWithViews(redisconn.Options{URL: "redis://" + rs.Addr, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	// Hold every connection of the live view's pools — commands' and
	// pipelines' (go-redis keeps one for each; a pipeline spills to the
	// commands' when its own is full) — each blocked in Redis until the
	// clients close.
	var held sync.WaitGroup
	defer func() { closeRedis(); held.Wait() }()
	opt := views.(*redis.Client).Options()
	size, pipes := opt.PoolSize, opt.PipelinePoolSize
	if pipes == 0 {
		pipes = redis.DefaultPipelinePoolSize
	}
	block := func(c redis.Cmdable) { c.BLPop(context.Background(), time.Minute, "nothing-comes") }
	for range pipes {
		held.Go(func() {
			_, _ = views.Pipelined(context.Background(), func(p redis.Pipeliner) error { block(p); return nil })
		})
	}
	waitFor := func(what string, full func(*redis.PoolStats) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for st := views.PoolStats(); !full(st); st = views.PoolStats() {
			if time.Now().After(deadline) {
				t.Fatalf("the live view's %s are not all taken: %+v", what, *st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("pipelines' connections", func(st *redis.PoolStats) bool {
		return st.PipelineStats != nil && st.PipelineStats.TotalConns >= uint32(pipes) && st.PipelineStats.IdleConns == 0
	})
	for range size {
		held.Go(func() { block(views) })
	}
	waitFor("commands' connections", func(st *redis.PoolStats) bool { return st.TotalConns >= uint32(size) && st.IdleConns == 0 })
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := views.Pipelined(short, func(p redis.Pipeliner) error { p.Time(short); return nil }); err == nil {
		t.Fatal("the live view could still read the clock: its pools are not exhausted")
	}

	cfg, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics()
	store, err := newConfigStore(cfg, m, log)
	if err != nil {
		t.Fatal(err)
	}
	var bg background
	defer bg.stop()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	lim := startLimiter(ctx, &bg, cfg, rdb, m, log)
	ten := startOverrides(&bg, cfg, rdb, store, lim, m, log)
	ready := startReadiness(&bg, cfg, rdb, m, nil, log)
	e := newEcho(assemble(cfg, rdb, views, lim, ten, store, ready, m, log))
	for i := range 20 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/check?policy=default&key=pool-"+newTestKey(i), nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("check %d while the live view's pool is taken: %d %s", i+1, rec.Code, rec.Body)
		}
	}
}

func newTestKey(i int) string { return time.Now().Format("150405.000000") + "-" + string(rune('a'+i)) }
