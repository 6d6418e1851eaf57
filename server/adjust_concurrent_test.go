package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
)

// call answers one request from any goroutine: a transport failure is an
// error, not t.Fatal.
func callJSON(client *http.Client, method, u, body string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %d %q", method, u, resp.StatusCode, b)
	}
	return resp.StatusCode, out, nil
}

// TestAdjustConcurrentWithChecks: 50 clients check on two instances and, as
// each check's request ends, refund its entries, settle them to fewer or
// keep them, through the other instance — while a reader watches the window.
// No read ever finds more than the limit, every refund and settle finds
// exactly what its check recorded, and the window ends holding exactly the
// entries kept.
func TestAdjustConcurrentWithChecks(t *testing.T) {
	const limit, workers, rounds = 10, 50, 40
	a, b := twoInstances(t, nil, "--policy", fmt.Sprintf("conc=%d/1m", limit))
	apps := []*apptest.App{a, b}
	key := newKey()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	t.Cleanup(client.CloseIdleConnections) // before the servers stop: they wait for open connections

	var kept, allowed, adjusted atomic.Int64
	var maxSeen atomic.Int64
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			status, w, err := callJSON(client, "GET", a.URL+"/api/v1/window?policy=conc&key="+key, "")
			if err != nil || status != 200 {
				t.Errorf("window: %d %v", status, err)
				return
			}
			if n := int64(w["count"].(float64)); n > maxSeen.Load() {
				maxSeen.Store(n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 31))
			for i := range rounds {
				cost := 1 + r.IntN(2)
				on, other := apps[(w+i)%2], apps[(w+i+1)%2]
				status, d, err := callJSON(client, "POST", fmt.Sprintf("%s/api/v1/check?policy=conc&key=%s&cost=%d", on.URL, key, cost), "")
				if err != nil || (status != 200 && status != 429) {
					t.Errorf("check: %d %v", status, err)
					return
				}
				if status != 200 {
					continue
				}
				allowed.Add(1)
				id := d["id"].(string)
				// Most requests end well and are refunded, some settle to
				// fewer, a few count as they are: the window keeps room to
				// churn for most of the test.
				switch n := r.IntN(20); {
				case n == 0:
					kept.Add(int64(cost))
				case n < 13:
					status, got, err := callJSON(client, "POST", other.URL+"/api/v1/refund", fmt.Sprintf(`{"key":%q,"policy":"conc","id":%q}`, key, id))
					if err != nil || status != 200 || got["refunded"] != float64(cost) {
						t.Errorf("refund of a cost-%d check: %d %v %v", cost, status, got, err)
						return
					}
					adjusted.Add(1)
				default:
					to := r.IntN(cost) // fewer than recorded: no debt
					status, got, err := callJSON(client, "POST", other.URL+"/api/v1/settle", fmt.Sprintf(`{"key":%q,"policy":"conc","id":%q,"cost":%d}`, key, id, to))
					if err != nil || status != 200 || got["was"] != float64(cost) || got["settled"] != float64(to) {
						t.Errorf("settle of a cost-%d check to %d: %d %v %v", cost, to, status, got, err)
						return
					}
					kept.Add(int64(to))
					adjusted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	reader.Wait()
	t.Logf("%d checks allowed, %d refunded or settled, %d entries kept; the reader saw at most %d", allowed.Load(), adjusted.Load(), kept.Load(), maxSeen.Load())
	if maxSeen.Load() > limit {
		t.Errorf("a read found %d entries in a window of limit %d", maxSeen.Load(), limit)
	}
	if allowed.Load() <= limit || adjusted.Load() == 0 {
		t.Errorf("%d checks allowed, %d adjusted: refunds made no room for more", allowed.Load(), adjusted.Load())
	}
	if n := windowCount(t, b, "conc", key); n != kept.Load() {
		t.Errorf("the window holds %d entries, but %d were kept", n, kept.Load())
	}
}
