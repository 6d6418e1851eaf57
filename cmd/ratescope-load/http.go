package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// httpPolicy is the server's policy for the load: a limit so large, spread
// over --keys keys, that every check is allowed and recorded (the expensive
// path: ZADD and PEXPIRE), while a 1 s window keeps each log tiny.
const httpPolicy = "load=100000/1s"

// The flood (issue 14): floodHotKeys keys filled to their limit before the
// run take every check but one in floodFreshEvery (denied, as in an attack);
// that one goes to a key never seen before (allowed and recorded). A window
// of an hour keeps the hot keys full for the whole run.
const (
	floodPolicy     = "flood=10/1h"
	floodLimit      = 10
	floodHotKeys    = 100
	floodFreshEvery = 10
)

// httpWarmup fills connection pools and Redis's script cache before a run.
const httpWarmup = time.Second

// measureHTTP drives POST /api/v1/check and, as the baseline, GET /healthz of
// one server process with the same keep-alive connections.
func measureHTTP(ctx context.Context, e *env) error {
	o := e.o
	srv, err := startServer(ctx, e.dir, e.redisURL, "--policy", httpPolicy, "--policy", floodPolicy)
	if err != nil {
		return err
	}
	defer srv.stop()

	tr := &http.Transport{
		MaxIdleConns:        o.conns,
		MaxIdleConnsPerHost: o.conns,
		MaxConnsPerHost:     o.conns,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	base := "http://" + srv.addr
	healthz := func(_, _ int) (*http.Request, error) {
		return http.NewRequest(http.MethodGet, base+"/healthz", nil)
	}
	check := func(worker, i int) (*http.Request, error) {
		key := (worker + i*o.conns) % o.keys
		return http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/v1/check?policy=load&key=load-%d", base, key), nil)
	}

	var fresh atomic.Int64 // a flood's fresh keys are never reused, warm-up included
	flood := func(worker, i int) (*http.Request, error) {
		key := fmt.Sprintf("flood-hot-%d", (worker+i*o.conns)%floodHotKeys)
		if i%floodFreshEvery == floodFreshEvery-1 {
			key = fmt.Sprintf("flood-fresh-%d", fresh.Add(1))
		}
		return http.NewRequest(http.MethodPost, base+"/api/v1/check?policy=flood&key="+key, nil)
	}
	if err := fillFloodKeys(ctx, client, base); err != nil {
		return err
	}

	runs := []*httpRun{
		{name: "GET /healthz (baseline)", req: healthz, byStatus: map[int]int{}},
		{name: "POST /api/v1/check", req: check, byStatus: map[int]int{}},
		{name: "POST /api/v1/check, flood", req: flood, byStatus: map[int]int{}},
	}
	for _, r := range runs {
		if _, err := drive(ctx, client, o.conns, httpWarmup, r.req); err != nil {
			return fmt.Errorf("failed to warm up %s: %w", r.name, err)
		}
	}
	progress("  %d rounds of %s per endpoint", o.rounds, o.slice())
	for range o.rounds {
		for _, r := range runs {
			meter := newCPUMeter(srv, e.redis)
			res, err := drive(ctx, client, o.conns, o.slice(), r.req)
			if err != nil {
				return fmt.Errorf("failed to measure %s: %w", r.name, err)
			}
			r.add(res, meter.stop())
		}
	}

	rep := e.rep
	rep.line("")
	rep.line("## HTTP: /api/v1/check against /healthz")
	rep.line("")
	rep.line("%d keep-alive connections from one Go HTTP client, %s per endpoint after a %s warm-up; the server in its own process with `--policy %s --policy %s`. The all-allowed checks spread over %d keys; the flood sends %d %% of its checks to %d keys filled to their limit beforehand (denied) and the rest to keys never seen before (allowed). Latency percentiles are over every request of every round.",
		o.conns, o.duration, httpWarmup, httpPolicy, floodPolicy, o.keys, 100-100/floodFreshEvery, floodHotKeys)
	rep.line("")
	rep.line("| endpoint | req/s (median) | min–max | p50 | p90 | p99 | max | answers |")
	rep.line("|---|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range runs {
		rep.line("| %s | %.0f | %s | %s | %s |", r.name, median(r.rates), spread("%.0f", r.rates), r.lat.cells(), statuses(r.byStatus))
	}
	rep.line("")
	for _, r := range runs {
		rep.line("- CPU during %s: %s", r.name, meanCPU(r.cpus))
	}
	ratio := ratios(runs[1].rates, runs[0].rates)
	rep.line("")
	rep.line("check / healthz = **%.2f** (rounds: %s; target ≥ 0.6: %s; a plain Echo + go-redis check measured 0.29 here)",
		median(ratio), spread("%.2f", ratio), verdict(median(ratio), 0.6))
	fr := ratios(runs[2].rates, runs[0].rates)
	rep.line("")
	rep.line("flood check / healthz = **%.2f** (rounds: %s; target ≥ 0.8: %s)", median(fr), spread("%.2f", fr), verdict(median(fr), 0.8))
	if m, err := srv.metrics(localDenialsMetric); err != nil {
		rep.line("- the server exports no `%s`: its local deny cache is off or not wired, so every flood denial cost a Redis round trip", localDenialsMetric)
	} else {
		rep.line("- the server's local deny cache answered %.0f checks over the whole phase (`%s`)", m[localDenialsMetric], localDenialsMetric)
	}
	return nil
}

// localDenialsMetric counts the denials a server's local deny cache answered.
const localDenialsMetric = "ratescope_local_denials_total"

// fillFloodKeys checks each of the flood's hot keys up to its limit, so that
// every later check on them is denied; it fails if one is not.
func fillFloodKeys(ctx context.Context, client *http.Client, base string) error {
	for k := range floodHotKeys {
		url := fmt.Sprintf("%s/api/v1/check?policy=flood&key=flood-hot-%d", base, k)
		for i := range floodLimit + 1 {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
			if err != nil {
				return fmt.Errorf("failed to build a request: %w", err)
			}
			resp, err := client.Do(req)
			if err != nil {
				return fmt.Errorf("failed to fill the flood's keys: %w", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if want := map[bool]int{true: http.StatusTooManyRequests, false: http.StatusOK}[i == floodLimit]; resp.StatusCode != want {
				return fmt.Errorf("failed to fill the flood's keys: check %d of flood-hot-%d answered %s, want %d", i+1, k, resp.Status, want)
			}
		}
	}
	return nil
}

// httpRun accumulates one endpoint's rounds.
type httpRun struct {
	name     string
	req      func(worker, i int) (*http.Request, error)
	rates    []float64
	lat      latencies
	byStatus map[int]int
	cpus     []cpuUse
}

func (r *httpRun) add(res httpResult, cpu cpuUse) {
	r.rates = append(r.rates, res.rate())
	r.lat = append(r.lat, res.lat...)
	for k, v := range res.byStatus {
		r.byStatus[k] += v
	}
	r.cpus = append(r.cpus, cpu)
}

// httpResult is one run's outcome.
type httpResult struct {
	took     time.Duration
	lat      latencies
	byStatus map[int]int
}

func (r httpResult) rate() float64 { return float64(len(r.lat)) / r.took.Seconds() }

func statuses(byStatus map[int]int) string {
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(byStatus)) {
		parts = append(parts, fmt.Sprintf("%d × %d", byStatus[code], code))
	}
	return strings.Join(parts, ", ")
}

// drive sends requests from conns goroutines, each one at a time over its own
// keep-alive connection, for d. A transport error or a 5xx ends the run with
// an error; 200 and 429 are both answers.
func drive(ctx context.Context, client *http.Client, conns int, d time.Duration, mk func(worker, i int) (*http.Request, error)) (httpResult, error) {
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu       sync.Mutex
		res      = httpResult{byStatus: map[int]int{}}
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	start := time.Now()
	for w := range conns {
		wg.Go(func() {
			var lat latencies
			status := map[int]int{}
			for i := 0; rctx.Err() == nil; i++ {
				req, err := mk(w, i)
				if err != nil {
					fail(fmt.Errorf("failed to build a request: %w", err))
					break
				}
				t0 := time.Now()
				resp, err := client.Do(req.WithContext(rctx))
				if err != nil {
					if rctx.Err() == nil {
						fail(fmt.Errorf("failed to send %s: %w", req.URL.Path, err))
					}
					break
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil {
					if rctx.Err() == nil {
						fail(fmt.Errorf("failed to read the answer of %s: %w", req.URL.Path, err))
					}
					break
				}
				if resp.StatusCode >= 500 {
					fail(fmt.Errorf("%s answered %s", req.URL.Path, resp.Status))
					break
				}
				lat = append(lat, time.Since(t0))
				status[resp.StatusCode]++
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			for k, v := range status {
				res.byStatus[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	switch {
	case firstErr != nil:
		return res, firstErr
	case ctx.Err() != nil:
		return res, ctx.Err()
	case len(res.lat) == 0:
		return res, errors.New("no request was answered")
	}
	return res, nil
}
