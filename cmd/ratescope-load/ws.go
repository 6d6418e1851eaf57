package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// dialers is how many viewers connect at once.
const dialers = 16

// decisionMark finds decision messages without decoding every tick.
var decisionMark = []byte(`"type":"decision"`)

// watchDecisions reads one viewer's stream and notes when each decision arrives.
func watchDecisions(ctx context.Context, conn *websocket.Conn, mu *sync.Mutex, arrived map[string][]time.Time, closed *atomic.Int64) {
	defer conn.CloseNow()
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				closed.Add(1)
			}
			return
		}
		if !bytes.Contains(b, decisionMark) {
			continue
		}
		now := time.Now()
		var m struct{ ID string }
		if json.Unmarshal(b, &m) == nil {
			mu.Lock()
			arrived[m.ID] = append(arrived[m.ID], now)
			mu.Unlock()
		}
	}
}

// measureFanOut connects N viewers to one window of a fresh server process,
// measures memory per idle viewer, then times each of K checks until every
// viewer has its decision message.
func measureFanOut(ctx context.Context, o options, redisURL string, rep *report) error {
	srv, err := startServer(ctx, redisURL, "--policy", "fan=100000/1m")
	if err != nil {
		return err
	}
	defer srv.stop()
	time.Sleep(time.Second)
	heap0, _ := srv.metric("go_memstats_heap_inuse_bytes")
	rss0, _ := srv.metric("process_resident_memory_bytes")

	key := fmt.Sprintf("fan-%d", time.Now().UnixNano())
	var (
		mu      sync.Mutex
		arrived = map[string][]time.Time{} // decision id → arrival at each viewer
		closed  atomic.Int64
	)
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	dialStart := time.Now()
	// Viewers connect from a few dialers at once, like a crowd arriving.
	var dialed sync.WaitGroup
	var next atomic.Int64
	var dialErr atomic.Pointer[error]
	for range dialers {
		dialed.Go(func() {
			for i := next.Add(1); i <= int64(o.viewers) && dialErr.Load() == nil; i = next.Add(1) {
				conn, _, err := websocket.Dial(vctx, "ws://"+srv.addr+"/ws?policy=fan&key="+key, &websocket.DialOptions{
					HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
				})
				if err != nil {
					err = fmt.Errorf("viewer %d failed to connect: %w", i, err)
					dialErr.Store(&err)
					return
				}
				conn.SetReadLimit(1 << 20)
				wg.Go(func() { watchDecisions(vctx, conn, &mu, arrived, &closed) })
			}
		})
	}
	dialed.Wait()
	if err := dialErr.Load(); err != nil {
		return *err
	}
	dialTook := time.Since(dialStart)
	time.Sleep(2 * time.Second) // idle: only ticks and snapshots
	heap1, _ := srv.metric("go_memstats_heap_inuse_bytes")
	rss1, _ := srv.metric("process_resident_memory_bytes")
	goroutines, _ := srv.metric("go_goroutines")

	var last, each latencies
	incomplete := 0
	client := &http.Client{}
	for range o.checks {
		t0 := time.Now()
		resp, err := client.Post("http://"+srv.addr+"/api/v1/check?policy=fan&key="+key, "", nil)
		if err != nil {
			return fmt.Errorf("failed to check: %w", err)
		}
		var d struct{ ID string }
		_ = json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			got := len(arrived[d.ID])
			mu.Unlock()
			if got >= o.viewers-int(closed.Load()) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		times := arrived[d.ID]
		mu.Unlock()
		if len(times) < o.viewers {
			incomplete++
		}
		var worst time.Duration
		for _, at := range times {
			each = append(each, at.Sub(t0))
			worst = max(worst, at.Sub(t0))
		}
		last = append(last, worst)
		time.Sleep(100 * time.Millisecond)
	}
	dropped, _ := srv.metric("ratescope_ws_dropped_slow_total")
	cancel()
	wg.Wait()

	rep.line("")
	rep.line("## WebSocket fan-out: %d viewers on one window", o.viewers)
	rep.line("")
	rep.line("connected in %s; server goroutines with viewers idle: %.0f", dialTook.Round(time.Millisecond), goroutines)
	rep.line("")
	rep.line("| measure | value |")
	rep.line("|---|---|")
	rep.line("| check → every viewer has the decision (per check, %d checks) | %s |", o.checks, last.summary())
	rep.line("| check → one viewer has it (all deliveries) | %s |", each.summary())
	rep.line("| checks not delivered to every viewer within 5 s | %d |", incomplete)
	rep.line("| viewers dropped as slow / closed | %.0f / %d |", dropped, closed.Load())
	rep.line("| server heap in use per idle viewer | %.1f KB |", (heap1-heap0)/float64(o.viewers)/1024)
	rep.line("| server RSS per idle viewer | %.1f KB |", (rss1-rss0)/float64(o.viewers)/1024)
	rep.line("")
	rep.line("targets: every viewer p99 ≤ 100 ms at 10,000 viewers; ≤ 64 KB per idle viewer")
	return nil
}
