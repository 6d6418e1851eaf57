package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestLabFloodCannotFillRedis: anonymous lab checks with a new lab name each,
// from 20 client addresses (forwarded by a trusted proxy), on a Redis with
// 8 MB to spare under maxmemory and noeviction: without a cap each new lab
// is ~7 KB of state and the flood fills Redis within ~1,200 checks; with
// the default --max-labs the labs beyond it get 503 with Retry-After and a
// problem document, counted, Redis never refuses a write (no OOM), real
// checks beside the flood answer 200 or 429 throughout (never 503), and a
// lab admitted before the flood goes on working.
func TestLabFloodCannotFillRedis(t *testing.T) {
	const (
		clients   = 20
		perClient = 300
		headroom  = 8 << 20
		maxLabs   = 64 // --max-labs by default
	)
	rs := redistest.Start(t)
	rdb := rs.Client()
	ctx := context.Background()
	app := startApp(t, map[string]string{"REDIS_URL": rs.URL}, "--trusted-proxies", "127.0.0.1", "--policy", "api=20/1s")
	kept := newLab()
	labResults(t, do(t, "POST", app.URL+"/api/v1/lab/check", `{"lab":"`+kept+`","limit":5,"windowMs":60000}`))
	used := usedMemory(t, rdb)
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", strconv.FormatInt(used+headroom, 10)}} {
		if err := rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("Redis uses %d bytes; maxmemory %d, noeviction", used, used+headroom)

	// Real checks, from an address of their own, all through the flood.
	stop := make(chan struct{})
	realDone := make(chan map[int]int)
	go func() {
		statuses := map[int]int{}
		for i := 0; ; i++ {
			select {
			case <-stop:
				realDone <- statuses
				return
			default:
			}
			r := do(t, "POST", app.URL+"/api/v1/check?policy=api&key=real-"+strconv.Itoa(i%5), "", "X-Forwarded-For", "10.9.9.9")
			statuses[r.status]++
			time.Sleep(5 * time.Millisecond)
		}
	}()

	var mu sync.Mutex
	labs := map[int]int{}
	var refusedRight, refusedWrong atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			client := &http.Client{}
			for i := range perClient {
				body := fmt.Sprintf(`{"lab":"flood-%d-%d","limit":100,"windowMs":60000}`, c, i)
				req, _ := http.NewRequest("POST", app.URL+"/api/v1/lab/check", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.0.0.%d", c+1))
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				var b strings.Builder
				_, _ = fmt.Fprint(&b, resp.Header.Get("Content-Type"))
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					if resp.Header.Get("Retry-After") != "" && b.String() == "application/problem+json" {
						refusedRight.Add(1)
					} else {
						refusedWrong.Add(1)
					}
				}
				mu.Lock()
				labs[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	real := <-realDone
	t.Logf("lab checks: %v; real checks: %v; Redis uses %d bytes", labs, real, usedMemory(t, rdb))

	if n := oomErrors(t, rdb); n > 0 {
		t.Errorf("Redis refused %d writes with OOM during the flood", n)
	}
	for status, n := range real {
		if status != http.StatusOK && status != http.StatusTooManyRequests {
			t.Errorf("%d real checks answered %d during the flood, want only 200 or 429", n, status)
		}
	}
	if labs[http.StatusOK] > maxLabs || refusedRight.Load() < clients*perClient-maxLabs || refusedWrong.Load() > 0 {
		t.Errorf("lab checks %v (%d refused without Retry-After or a problem); want at most the %d labs --max-labs holds by default, the rest 503 with Retry-After",
			labs, refusedWrong.Load(), maxLabs)
	}
	if m := metrics(t, app); !strings.Contains(m, fmt.Sprintf(`ratescope_lab_refused_total{reason="labs"} %d`+"\n", refusedRight.Load())) {
		t.Errorf("/metrics does not count %d labs refused:\n%s", refusedRight.Load(), grepLines(m, "lab_refused"))
	}
	labResults(t, do(t, "POST", app.URL+"/api/v1/lab/check", `{"lab":"`+kept+`","limit":5,"windowMs":60000}`))
}

// oomErrors is how many commands Redis refused with OOM (INFO errorstats).
func oomErrors(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.InfoMap(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stat := info["Errorstats"]["errorstat_OOM"] // count=N
	if stat == "" {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimPrefix(stat, "count="), 10, 64)
	return n
}

// TestLabBehindTheAPIToken: with --api-token the lab's checks and resets
// need the API (or admin) token — 401 with WWW-Authenticate without it —
// and the page says so and asks for it; watching needs none; --public-lab
// opens it again; with no API token the lab is open, the page too.
func TestLabBehindTheAPIToken(t *testing.T) {
	check := func(app string, header ...string) response {
		return do(t, "POST", app+"/api/v1/lab/check", `{"lab":"locked","limit":5,"windowMs":10000}`, header...)
	}
	locked := func(app string) bool {
		_, html := doRaw(t, "GET", app+"/lab?lab=locked")
		doc, err := goquery.NewDocumentFromReader(strings.NewReader(html))
		if err != nil {
			t.Fatal(err)
		}
		return doc.Find(`[data-testid="lab-locked"]`).Length() == 1 && doc.Find(`[data-testid="lab-token"]`).Length() == 1
	}

	tokens := startApp(t, nil, "--api-token", "api-secret", "--admin-token", "admin-secret")
	r := check(tokens.URL)
	if r.status != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" || !strings.Contains(r.raw, "--public-lab") {
		t.Fatalf("a lab check without the token: %d %v %s; want 401 with WWW-Authenticate naming --public-lab", r.status, r.header, r.raw)
	}
	if r := do(t, "DELETE", tokens.URL+"/api/v1/lab?lab=locked", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("a lab reset without the token: %d %s, want 401", r.status, r.raw)
	}
	if r := check(tokens.URL, "Authorization", "Bearer wrong"); r.status != http.StatusUnauthorized {
		t.Fatalf("a lab check with a wrong token: %d %s, want 401", r.status, r.raw)
	}
	labResults(t, check(tokens.URL, "Authorization", "Bearer api-secret"))
	labResults(t, check(tokens.URL, "Authorization", "Bearer admin-secret"))
	if r := do(t, "DELETE", tokens.URL+"/api/v1/lab?lab=locked", "", "Authorization", "Bearer api-secret"); r.status != http.StatusNoContent {
		t.Fatalf("a lab reset with the token: %d %s, want 204", r.status, r.raw)
	}
	watchAt(t, tokens, "/ws/lab", "lab=locked", nil)
	if !locked(tokens.URL) {
		t.Error("the lab page does not say the lab needs the API token, or asks for none")
	}

	public := startApp(t, nil, "--api-token", "api-secret", "--public-lab")
	labResults(t, check(public.URL))
	if locked(public.URL) {
		t.Error("with --public-lab the page still asks for a token")
	}

	open := startApp(t, nil)
	labResults(t, check(open.URL))
	if locked(open.URL) {
		t.Error("with no API token the page asks for one")
	}
}
