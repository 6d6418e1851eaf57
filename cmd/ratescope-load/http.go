package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// measureHTTP drives POST /api/v1/check and, as the baseline, GET /healthz of
// the same server with the same connections.
func measureHTTP(ctx context.Context, o options, redisURL string, rep *report) error {
	srv, err := startServer(ctx, redisURL, "--policy", "load=100000/1s")
	if err != nil {
		return err
	}
	defer srv.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.conns, MaxConnsPerHost: o.conns}}
	base := "http://" + srv.addr
	healthz := func(int) (*http.Request, error) { return http.NewRequest(http.MethodGet, base+"/healthz", nil) }
	check := func(i int) (*http.Request, error) {
		return http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/v1/check?policy=load&key=load-%d", base, i%1000), nil)
	}
	// A short warm-up fills connection pools on both sides.
	if _, _, err := drive(ctx, client, o.conns, time.Second, check); err != nil {
		return err
	}
	hRate, hLat, err := drive(ctx, client, o.conns, o.duration, healthz)
	if err != nil {
		return err
	}
	cRate, cLat, err := drive(ctx, client, o.conns, o.duration, check)
	if err != nil {
		return err
	}
	rep.line("")
	rep.line("## HTTP: /api/v1/check against /healthz (%d connections, %s each)", o.conns, o.duration)
	rep.line("")
	rep.line("| endpoint | req/s | latency |")
	rep.line("|---|---|---|")
	rep.line("| GET /healthz (baseline) | %.0f | %s |", hRate, hLat.summary())
	rep.line("| POST /api/v1/check | %.0f | %s |", cRate, cLat.summary())
	rep.line("")
	rep.line("check / baseline = **%.2f** (target ≥ 0.6)", cRate/hRate)
	return nil
}

// drive sends requests from conns goroutines for d and returns req/s and latencies.
func drive(ctx context.Context, client *http.Client, conns int, d time.Duration, req func(int) (*http.Request, error)) (float64, latencies, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var all latencies
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conns {
		wg.Go(func() {
			var mine latencies
			for i := w; ctx.Err() == nil; i += conns {
				r, err := req(i)
				if err != nil {
					firstErr = err
					return
				}
				t0 := time.Now()
				resp, err := client.Do(r.WithContext(ctx))
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						firstErr = fmt.Errorf("failed to send: %w", err)
						mu.Unlock()
					}
					break
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 500 {
					mu.Lock()
					firstErr = fmt.Errorf("%s answered %s", r.URL.Path, resp.Status)
					mu.Unlock()
					break
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return float64(len(all)) / time.Since(start).Seconds(), all, firstErr
}
