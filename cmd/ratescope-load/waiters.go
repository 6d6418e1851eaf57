package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The waiters phase (--waiters) measures what a check held for its booked
// slot costs the server: --waiter-count client keys (w<n>) each fill their
// window of one request (policy wt=1/<--waiter-hold>), then each sends a
// check with wait=30s, which books the moment that entry slides out and is
// held until then. With every one held at once (ratescope_waiters_held),
// the server's heap in use, RSS and goroutines, less what they were before,
// divided by the waiters, are a held request's memory; its CPU over a
// second of holding is what the timers cost. Every waiter must then be
// answered 200, no sooner than its slot.
const (
	mWaitersHeld = "ratescope_waiters_held"
	mWaitsServed = "ratescope_waits_served_total"
	waiterBound  = 64 << 10 // the most a held request may cost, heap or RSS
)

func measureWaiters(ctx context.Context, e *env) error {
	n, hold := e.o.waiterCount, e.o.waiterHold
	srv, err := startServer(ctx, e.dir, e.redisURL, "--policy", fmt.Sprintf("wt=1/%ds", int(hold.Seconds())),
		"--max-waiters", strconv.Itoa(n), "--check-timeout", "5s")
	if err != nil {
		return err
	}
	defer srv.stop()
	// One connection a waiter: a held request keeps its own.
	client := &http.Client{Timeout: hold + 30*time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: algoWorkers}}
	defer client.CloseIdleConnections()
	base := "http://" + srv.addr + "/api/v1/check?policy=wt&key=w"
	run := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	fillStart := time.Now()
	if err := forN(ctx, int64(n), func(i int64) error {
		status, _, err := post(ctx, client, base+run+strconv.FormatInt(i, 10))
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("the first check of key %d answered %d", i, status)
		}
		return err
	}); err != nil {
		return err
	}
	fillTook := time.Since(fillStart)
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	before, err := srv.metrics(mHeap, mRSS, mGoroutines)
	if err != nil {
		return err
	}

	var wg sync.WaitGroup
	var served, early atomic.Int64
	var failures atomic.Int64
	var firstErr atomic.Value
	bookStart := time.Now()
	for i := range n {
		wg.Go(func() {
			sent := time.Now()
			status, body, err := post(ctx, client, base+run+strconv.Itoa(i)+"&wait=30s")
			switch {
			case err != nil:
				failures.Add(1)
				firstErr.CompareAndSwap(nil, err)
			case status != http.StatusOK || body.BookedMs == 0:
				failures.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Errorf("a waiter answered %d, booked %d", status, body.BookedMs))
			default:
				served.Add(1)
				if time.Since(sent) < time.Duration(body.BookedMs-body.NowMs)*time.Millisecond {
					early.Add(1)
				}
			}
		})
	}
	defer wg.Wait()
	// Every waiter held: the gauge says so.
	deadline := time.Now().Add(hold)
	for {
		m, err := srv.metrics(mWaitersHeld)
		if err != nil {
			return err
		}
		if int(m[mWaitersHeld]) >= n {
			break
		}
		if time.Now().After(deadline) || failures.Load() > 0 {
			return fmt.Errorf("only %.0f of %d waiters held within %s (%d failed: %v)", m[mWaitersHeld], n, hold, failures.Load(), firstErr.Load())
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	bookTook := time.Since(bookStart)
	meter := newCPUMeter(srv, e.redis)
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	cpu := meter.stop()
	held, err := srv.metrics(mHeap, mRSS, mGoroutines, mWaitersHeld)
	if err != nil {
		return err
	}
	wg.Wait()
	after, err := srv.metrics(mWaitsServed)
	if err != nil {
		return err
	}

	per := func(name string) float64 { return (held[name] - before[name]) / float64(n) }
	r := e.rep
	r.line("")
	r.line("## Waiting for a slot: what a held request costs")
	r.line("")
	r.line("%d client keys each filled `wt=1/%ds` (%s), then each sent a check with `wait=30s`: all %d booked and held within %s, each until its entry slid out.",
		n, int(hold.Seconds()), fillTook.Round(time.Millisecond), n, bookTook.Round(time.Millisecond))
	r.line("")
	r.line("- server heap in use per held request: %.1f KB (%.1f → %.1f MB)", per(mHeap)/1024, before[mHeap]/1e6, held[mHeap]/1e6)
	r.line("- server RSS per held request: %.1f KB (%.1f → %.1f MB)", per(mRSS)/1024, before[mRSS]/1e6, held[mRSS]/1e6)
	r.line("- server goroutines per held request: %.2f (%.0f → %.0f)", per(mGoroutines), before[mGoroutines], held[mGoroutines])
	r.line("- CPU over one second with every request held: %s", cpu)
	r.line("- answered 200 at their slots: %d of %d (%d failed, %d sooner than their booked wait; the server counts %.0f waits served)",
		served.Load(), n, failures.Load(), early.Load(), after[mWaitsServed])
	switch {
	case failures.Load() > 0:
		return fmt.Errorf("%d waiters failed: %v", failures.Load(), firstErr.Load())
	case early.Load() > 0:
		return fmt.Errorf("%d waiters were answered before their slot", early.Load())
	case per(mHeap) > waiterBound || per(mRSS) > waiterBound:
		return fmt.Errorf("a held request costs more than %d KB", waiterBound>>10)
	}
	return nil
}

// waitAnswer is what the waiters phase reads of a check's answer.
type waitAnswer struct {
	NowMs    int64 `json:"nowMs"`
	BookedMs int64 `json:"bookedMs"`
}

// post sends one check and reads its status and answer.
func post(ctx context.Context, client *http.Client, u string) (int, waitAnswer, error) {
	var a waitAnswer
	req, err := http.NewRequestWithContext(ctx, "POST", u, nil)
	if err != nil {
		return 0, a, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, a, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, a, err
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &a); err != nil {
			return resp.StatusCode, a, fmt.Errorf("failed to read a check's answer: %w", err)
		}
	}
	return resp.StatusCode, a, nil
}
