package rls_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/rls"
)

// counters records what an observer of the Checker was told.
type counters struct {
	mu                               sync.Mutex
	inFlight, maxInFlight, durations int
	decided                          map[string]int // policy/outcome
	redisErrors, failOpen            map[string]int // by policy
}

func (c *counters) observer() httplimit.Observer {
	c.decided, c.redisErrors, c.failOpen = map[string]int{}, map[string]int{}, map[string]int{}
	return c
}

func (c *counters) Started(httplimit.Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight++
	c.maxInFlight = max(c.maxInFlight, c.inFlight)
}

func (c *counters) Finished(t httplimit.Target, res httplimit.Result, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	c.durations++
	if res.Err != nil {
		c.redisErrors[t.Policy.Name]++
	}
	if res.FailedOpen() {
		c.failOpen[t.Policy.Name]++
	}
}

func (c *counters) Decided(d limiter.Decision) {
	outcome := map[bool]string{true: "allowed", false: "denied"}[d.Allowed]
	c.mu.Lock()
	defer c.mu.Unlock()
	c.decided[d.Policy+"/"+outcome]++
}

// TestMetricsHooks are fed as the HTTP check feeds its metrics: one
// duration and one decision per decided descriptor, the in-flight gauge
// back at zero.
func TestMetricsHooks(t *testing.T) {
	c := &counters{}
	h := serve(t, redistest.URL(t), func(d *rls.Deps) { d.Checker.Observers = append(d.Checker.Observers, c.observer()) })
	ip := "remote_address=" + newValue()
	for range 4 {
		h.call(t, request(0, ip, "generic_key="+newValue(), "header_match=x"))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[string]int{"ip/allowed": 3, "ip/denied": 1, "global/allowed": 4}
	if !equalCounts(c.decided, want) || c.durations != 8 || c.inFlight != 0 || c.maxInFlight < 1 {
		t.Errorf("decided %v (want %v), %d durations (want 8), in flight %d (max %d)",
			c.decided, want, c.durations, c.inFlight, c.maxInFlight)
	}
	if len(c.redisErrors)+len(c.failOpen) != 0 {
		t.Errorf("errors %v, fail-open %v with Redis up", c.redisErrors, c.failOpen)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestFailModes: with Redis not answering, fail-closed answers Unavailable
// and fail-open answers OK with no limit, counted — either way within the
// check timeout, and both back to deciding once Redis answers again.
func TestFailModes(t *testing.T) {
	const checkTimeout = 300 * time.Millisecond
	for _, open := range []bool{false, true} {
		t.Run(map[bool]string{false: "closed", true: "open"}[open], func(t *testing.T) {
			proxy := redistest.StartProxy(t, redistest.URL(t))
			c := &counters{}
			h := serve(t, proxy.URL, func(d *rls.Deps) {
				d.Checker.Timeout = checkTimeout
				d.Checker.Observers = append(d.Checker.Observers, c.observer())
				if open {
					d.Checker.FailMode = httplimit.FailOpen
				}
			})
			req := request(0, "remote_address="+newValue(), "header_match=x")
			h.call(t, req) // connected and deciding
			proxy.Pause()
			start := time.Now()
			resp, err := h.client.ShouldRateLimit(context.Background(), req)
			// The bound is the point here, but the machine is shared: allow
			// ten times the timeout for scheduling, not for waiting on Redis.
			if took := time.Since(start); took > 10*checkTimeout {
				t.Errorf("the answer took %v with a %v check timeout", took, checkTimeout)
			}
			if !open {
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("fail-closed: got %v, %v; want Unavailable", resp, err)
				}
			} else {
				if err != nil {
					t.Fatalf("fail-open: %v", err)
				}
				for i, st := range resp.GetStatuses() {
					if st.GetCode() != ok || st.GetCurrentLimit() != nil {
						t.Errorf("fail-open status %d: %v, want OK with no limit", i, st)
					}
				}
				if resp.GetOverallCode() != ok || len(resp.GetResponseHeadersToAdd()) != 0 {
					t.Errorf("fail-open: %v, want OK with no headers", resp)
				}
			}
			c.mu.Lock()
			wantOpen := map[bool]int{false: 0, true: 1}[open]
			if c.redisErrors["ip"] != 1 || c.failOpen["ip"] != wantOpen || len(c.failOpen) > 1 {
				t.Errorf("redis errors %v, fail-open %v; want one error and %d fail-open, for ip only", c.redisErrors, c.failOpen, wantOpen)
			}
			c.mu.Unlock()

			proxy.Resume()
			deadline := time.Now().Add(testTimeout)
			for {
				resp, err := h.client.ShouldRateLimit(context.Background(), req)
				if err == nil && resp.GetStatuses()[0].GetCurrentLimit() != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no decision after Redis came back: %v, %v", resp, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
