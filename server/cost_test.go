package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestLogCostBound: one log check adds at most 1,000 entries, so a cost of
// 1,001 is 400 naming cost, and a client running cost-1,000 checks back to
// back on one key cannot keep another client's checks from an answer within
// the check timeout (fail-closed would answer 503 past it).
//
// The check timeout is the tests' generous one (startApp's), not the default
// 150 ms: on a two-core machine loaded by other work, and under -race, 100
// concurrent checks sometimes miss 150 ms whatever the hog does. (At 150 ms,
// a hog of cost 100,000 — what the bound now refuses — made the other
// client's checks 503 in 5 of 6 runs there, a hog of 1,000 in 3 of 63.)
func TestLogCostBound(t *testing.T) {
	app := startApp(t, map[string]string{"REDIS_URL": redistest.RealURL(t)}, "--policy", "big=100000/10s")
	for _, body := range []string{`{"key":"c1","policy":"big","cost":1001}`, `{"key":"c1","policy":"big","cost":100000}`} {
		r := do(t, "POST", app.URL+"/api/v1/check", body)
		if r.status != 400 || !strings.Contains(r.raw, `"field":"cost"`) {
			t.Fatalf("%s: %d %s, want 400 naming cost", body, r.status, r.raw)
		}
	}

	var hogs, hogFailures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := http.Post(app.URL+"/api/v1/check?policy=big&key=hog&cost=1000", "", nil)
			if err != nil || (resp.StatusCode != 200 && resp.StatusCode != 429) {
				hogFailures.Add(1)
			}
			if resp != nil {
				resp.Body.Close()
			}
			hogs.Add(1)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, 10*time.Second, "the first cost-1,000 checks", func() bool { return hogs.Load() >= 3 })

	for round := range 3 {
		statuses := make([]int, 100)
		var others sync.WaitGroup
		for i := range statuses {
			others.Add(1)
			go func() {
				defer others.Done()
				resp, err := http.Post(fmt.Sprintf("%s/api/v1/check?policy=big&key=other-%d", app.URL, round), "", nil)
				if err != nil {
					return
				}
				resp.Body.Close()
				statuses[i] = resp.StatusCode
			}()
		}
		others.Wait()
		for i, s := range statuses {
			if s != 200 {
				t.Fatalf("round %d: check %d of the other client answered %d (the hog had run %d checks)", round, i, s, hogs.Load())
			}
		}
	}
	t.Logf("the hog ran %d checks (%d failed) meanwhile", hogs.Load(), hogFailures.Load())
}
