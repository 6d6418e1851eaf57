package e2e_test

// Helpers of the busy-window tests: a policy with room for 30,000 entries,
// entries written straight into its sorted set, a paced load of checks, and
// readings of the page's clock, DOM and heap.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/heapprofiler"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
)

const (
	busyPolicy = "busy"
	// busyLimit leaves a window seeded with more than 20,000 entries little
	// room, so a load of checks costing at most 1,000 each (the log's bound)
	// is both allowed and denied.
	busyLimit = 30_000
)

// busyArgs defines the busy policy.
var busyArgs = []string{"--policy", fmt.Sprintf("%s=%d/1m", busyPolicy, busyLimit)}

func (e *env) busyURL() string {
	return e.app.URL + "/?key=" + url.QueryEscape(e.key) + "&policy=" + busyPolicy
}

// seed writes n entries into the busy window's sorted set directly, in the
// format of SPEC §2 (member a UUID v4, score Redis TIME in ms), spread evenly
// over the span before Redis's now. Much faster than n checks.
func (e *env) seed(t *testing.T, n int, span time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	key := "rate_limit:{" + e.key + "}:" + busyPolicy
	end := now.UnixMilli()
	const batch = 2000
	for i := 0; i < n; i += batch {
		zs := make([]redis.Z, 0, batch)
		for j := i; j < min(n, i+batch); j++ {
			ms := end - span.Milliseconds() + int64(j+1)*span.Milliseconds()/int64(n)
			zs = append(zs, redis.Z{Score: float64(ms), Member: uuid.NewString()})
		}
		if err := e.rdb.ZAdd(ctx, key, zs...).Err(); err != nil {
			t.Fatalf("ZADD %s: %v", key, err)
		}
	}
	if err := e.rdb.PExpire(ctx, key, time.Minute).Err(); err != nil {
		t.Fatalf("PEXPIRE %s: %v", key, err)
	}
}

// loadStats counts the answers to the checks load sent.
type loadStats struct {
	sent, allowed, denied, other atomic.Int64
	firstOther                   atomic.Value // string
}

// load sends rate checks a second on the busy window until stop is closed:
// two of every three cost 1 (allowed while the window has room), the third
// costs a little more than the room left (denied), and at most 1,000, the
// most one log check may cost (while the room is larger, it is allowed and
// fills the window). Only a little more: a denial's retry time reads the
// k-th oldest entry, k = count + cost − limit. It counts the answers in st as
// they come and returns st when every check has been answered.
func (e *env) load(t *testing.T, rate int, stop <-chan struct{}, st *loadStats) *loadStats {
	t.Helper()
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64},
	}
	defer client.CloseIdleConnections()
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var next atomic.Int64
	var remaining atomic.Int64 // the room left, as the last answer said
	remaining.Store(busyLimit)
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				at := start.Add(time.Duration(i) * interval)
				select {
				case <-stop:
					return
				case <-time.After(time.Until(at)):
				}
				cost := int64(1)
				if i%3 == 2 {
					// Room grows as entries slide out: some slack keeps it a denial.
					cost = min(limiter.MaxLogCost, remaining.Load()+500)
				}
				body, _ := json.Marshal(map[string]any{"key": e.key, "policy": busyPolicy, "cost": cost})
				st.sent.Add(1)
				resp, err := client.Post(e.app.URL+"/api/v1/check", "application/json", bytes.NewReader(body))
				if err != nil {
					st.other.Add(1)
					st.firstOther.CompareAndSwap(nil, err.Error())
					continue
				}
				var answer struct {
					Remaining *int64 `json:"remaining"`
				}
				if json.NewDecoder(resp.Body).Decode(&answer) == nil && answer.Remaining != nil {
					remaining.Store(*answer.Remaining)
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					st.allowed.Add(1)
				case http.StatusTooManyRequests:
					st.denied.Add(1)
				default:
					st.other.Add(1)
					st.firstOther.CompareAndSwap(nil, resp.Status)
				}
			}
		})
	}
	wg.Wait()
	return st
}

// clockWithin checks that the page's clock is within slack of the server's
// (Redis's) clock: the server's nowMs, asked between two readings of the
// page's clock, must lie between them, give or take slack.
func clockWithin(t *testing.T, e *env, tb *tab, slack int64) {
	t.Helper()
	before, ok1 := clockMs(tb.state().Clock)
	server := e.windowNowMs(t)
	after, ok2 := clockMs(tb.state().Clock)
	if !ok1 || !ok2 {
		t.Fatalf("the clock does not read 13 digits")
	}
	if server < before-slack || server > after+slack {
		t.Errorf("the page's clock read %d then %d, but the server's nowMs was %d in between: more than %d ms apart", before, after, server, slack)
	}
}

// heapAfterGC collects the page's garbage and returns the JS heap in use.
func heapAfterGC(tb *tab) float64 {
	tb.t.Helper()
	tb.do("collect garbage", func(ctx context.Context) error {
		_, err := chromedp.Call(ctx, heapprofiler.CollectGarbage, cdp.Empty{})
		return err
	})
	return evaluate[float64](tb, `performance.memory.usedJSHeapSize`)
}

func readDOM(tb *tab) int {
	tb.t.Helper()
	return evaluate[int](tb, `document.getElementsByTagName('*').length`)
}
