package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/ratescope/ratescope/internal/bus"
)

// The overview phase (--overview): what the traffic overview costs the
// check path. Every check is counted by the overview whether or not anyone
// watches; a watcher adds, each second, the overview's merge and message on
// the instance it watches and, on every other instance, a summary published
// over Redis. Two server processes share the Redis; the load (all-allowed
// checks over --keys keys, against /healthz as in the HTTP phase) goes to
// the first. Interleaved rounds run three variants: nobody watching, one
// watcher of the policy's overview on the loaded instance, and one on the
// other instance.

// overviewVariant is one variant of the phase: where its watcher is.
type overviewVariant struct {
	name    string
	watchOn *serverProc // nil: nobody watches
	healthz *httpRun
	check   *httpRun
	msgs    atomic.Int64 // overview messages the watcher received
}

func measureOverview(ctx context.Context, e *env) error {
	o := e.o
	a, err := startServerAs(ctx, e.dir, "the loaded ratescope server", "server.log", e.redisURL, "--policy", httpPolicy)
	if err != nil {
		return err
	}
	defer a.stop()
	b, err := startServerAs(ctx, e.dir, "the second ratescope server", "server2.log", e.redisURL, "--policy", httpPolicy)
	if err != nil {
		return err
	}
	defer b.stop()

	tr := &http.Transport{MaxIdleConns: o.conns, MaxIdleConnsPerHost: o.conns, MaxConnsPerHost: o.conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	base := "http://" + a.addr
	healthz := func(_, _ int) (*http.Request, error) { return http.NewRequest(http.MethodGet, base+"/healthz", nil) }
	check := func(worker, i int) (*http.Request, error) {
		key := (worker + i*o.conns) % o.keys
		return http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/v1/check?policy=load&key=load-%d", base, key), nil)
	}
	variants := []*overviewVariant{
		{name: "nobody watching"},
		{name: "one watcher on the loaded instance", watchOn: a},
		{name: "one watcher on the other instance", watchOn: b},
	}
	for _, v := range variants {
		v.healthz = &httpRun{name: "healthz", req: healthz, byStatus: map[int]int{}}
		v.check = &httpRun{name: "check", req: check, byStatus: map[int]int{}}
	}
	for _, req := range []func(int, int) (*http.Request, error){healthz, check} {
		if _, err := drive(ctx, client, o.conns, httpWarmup, req); err != nil {
			return fmt.Errorf("failed to warm up: %w", err)
		}
	}
	progress("  %d rounds of %s per endpoint and variant", o.rounds, o.slice())
	for range o.rounds {
		for _, v := range variants {
			if err := v.round(ctx, e, client, a); err != nil {
				return fmt.Errorf("failed to measure %s: %w", v.name, err)
			}
		}
	}

	rep := e.rep
	rep.line("")
	rep.line("## The traffic overview: /api/v1/check against /healthz, watched and not")
	rep.line("")
	rep.line("Two server processes on one Redis, each with `--policy %s`; %d keep-alive connections send all-allowed checks over %d keys (so every second's summaries are full) and, as the baseline, `/healthz`, to the first; %s per endpoint and variant, in %d interleaved rounds. A watcher is one WebSocket on `/ws/overview?policy=load`, connected for the variant's rounds.",
		httpPolicy, o.conns, o.keys, o.duration, o.rounds)
	rep.line("")
	rep.line("| variant | healthz req/s | check req/s | check / healthz | rounds | watcher's messages |")
	rep.line("|---|---:|---:|---:|---|---:|")
	for _, v := range variants {
		r := ratios(v.check.rates, v.healthz.rates)
		rep.line("| %s | %.0f | %.0f | **%.2f** | %s | %d |", v.name, median(v.healthz.rates), median(v.check.rates), median(r), spread("%.2f", r), v.msgs.Load())
	}
	rep.line("")
	for _, v := range variants {
		rep.line("- CPU during the checks, %s: %s", v.name, meanCPU(v.check.cpus))
	}
	return nil
}

// round runs one round of v: its watcher connected (if any), healthz, then
// the checks.
func (v *overviewVariant) round(ctx context.Context, e *env, client *http.Client, loaded *serverProc) error {
	if v.watchOn != nil {
		stop, err := v.watch(ctx, v.watchOn)
		if err != nil {
			return err
		}
		defer stop()
	}
	for _, r := range []*httpRun{v.healthz, v.check} {
		meter := newCPUMeter(loaded, e.redis)
		res, err := drive(ctx, client, e.o.conns, e.o.slice(), r.req)
		if err != nil {
			return err
		}
		r.add(res, meter.stop())
	}
	return nil
}

// watch connects one overview watcher to srv, counting the overview
// messages it reads, until stop.
func (v *overviewVariant) watch(ctx context.Context, srv *serverProc) (stop func(), err error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(dctx, "ws://"+srv.addr+"/ws/overview?policy=load", nil)
	if err != nil {
		return nil, fmt.Errorf("failed to connect an overview watcher: %w", err)
	}
	conn.SetReadLimit(1 << 22)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			_, b, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			v.msgs.Add(int64(strings.Count(string(b), `"type":"`+bus.TypeOverview+`"`)))
		}
	})
	return func() { conn.CloseNow(); wg.Wait() }, nil
}
