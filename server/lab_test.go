package server_test

import (
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// labAlgorithms are the lab's lanes: every algorithm the limiter has, in its order.
var labAlgorithms = func() []string {
	var names []string
	for _, a := range limiter.Algorithms() {
		names = append(names, string(a.Name))
	}
	return names
}()

func newLab() string { return "lab-" + uuid.NewString()[:8] }

// labResults reads a lab answer's results as algorithm -> allowed, checking
// there is one per algorithm in SPEC §8's order.
func labResults(t testing.TB, r response) map[string]bool {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("lab check: %d %s", r.status, r.raw)
	}
	rs, _ := r.body["results"].([]any)
	if len(rs) != len(labAlgorithms) {
		t.Fatalf("%d results, want %d: %s", len(rs), len(labAlgorithms), r.raw)
	}
	out := map[string]bool{}
	for i, x := range rs {
		m := x.(map[string]any)
		if m["algorithm"] != labAlgorithms[i] {
			t.Fatalf("result %d is %v, want %s: %s", i, m["algorithm"], labAlgorithms[i], r.raw)
		}
		for _, k := range []string{"allowed", "remaining", "retryAfterMs"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("result %d has no %s: %s", i, k, r.raw)
			}
		}
		out[labAlgorithms[i]] = m["allowed"].(bool)
	}
	num(t, r, "nowMs")
	return out
}

// TestLabCheckAndReset: a lab decides under all five algorithms at once,
// needs no token with --public-lab even when tokens are configured, and a
// reset empties all five.
func TestLabCheckAndReset(t *testing.T) {
	app := startApp(t, nil, "--api-token", "api-secret", "--admin-token", "admin-secret", "--public-lab")
	lab := newLab()
	body := `{"lab":"` + lab + `","limit":2,"windowMs":60000,"cost":1}`
	var first, last response
	for i := range 3 {
		r := do(t, "POST", app.URL+"/api/v1/lab/check", body)
		got := labResults(t, r)
		for _, a := range labAlgorithms {
			if got[a] != (i < 2) && !(a == "fixed" || a == "counter") {
				t.Errorf("request %d under %s: allowed %v", i+1, a, got[a])
			}
		}
		if i == 0 {
			first = r
		}
		last = r
	}
	// fixed and counter start a new window at each multiple of 60 s: only
	// when no edge fell between the requests must they deny the third.
	if num(t, first, "nowMs")/60000 == num(t, last, "nowMs")/60000 {
		got := labResults(t, last)
		if got["fixed"] || got["counter"] {
			t.Errorf("third request within one fixed window: fixed %v, counter %v, want denied", got["fixed"], got["counter"])
		}
	}
	if r := do(t, "DELETE", app.URL+"/api/v1/lab?lab="+lab, ""); r.status != http.StatusNoContent {
		t.Fatalf("reset: %d %s", r.status, r.raw)
	}
	for a, ok := range labResults(t, do(t, "POST", app.URL+"/api/v1/lab/check", body)) {
		if !ok {
			t.Errorf("after the reset %s denied", a)
		}
	}
}

// TestLabBadInput: each bad field is a 400 problem naming it.
func TestLabBadInput(t *testing.T) {
	app := startApp(t, nil)
	for _, tc := range []struct{ method, path, body, field string }{
		{"POST", "/api/v1/lab/check", `{"limit":5,"windowMs":10000}`, "lab"},
		{"POST", "/api/v1/lab/check", `{"lab":"a b","limit":5,"windowMs":10000}`, "lab"},
		{"POST", "/api/v1/lab/check", `{"lab":"` + strings.Repeat("a", 65) + `","limit":5,"windowMs":10000}`, "lab"},
		{"POST", "/api/v1/lab/check", `{"lab":"x","windowMs":10000}`, "limit"},
		{"POST", "/api/v1/lab/check", `{"lab":"x","limit":0,"windowMs":10000}`, "limit"},
		{"POST", "/api/v1/lab/check", `{"lab":"x","limit":101,"windowMs":10000}`, "limit"},
		{"POST", "/api/v1/lab/check", `{"lab":"x","limit":5}`, "windowMs"},
		{"POST", "/api/v1/lab/check", `{"lab":"x","limit":5,"windowMs":999}`, "windowMs"},
		{"POST", "/api/v1/lab/check", `{"lab":"x","limit":5,"windowMs":60001}`, "windowMs"},
		{"POST", "/api/v1/lab/check", `{"lab":"x","limit":5,"windowMs":1500.5}`, "windowMs"},
		{"POST", "/api/v1/lab/check", `{"lab":"x","limit":5,"windowMs":10000,"cost":6}`, "cost"},
		{"POST", "/api/v1/lab/check", `{"lab":"x","limit":5,"windowMs":10000,"cost":0}`, "cost"},
		{"DELETE", "/api/v1/lab", "", "lab"},
		{"DELETE", "/api/v1/lab?lab=%7Bx%7D", "", "lab"},
		{"GET", "/ws/lab?lab=a%20b", "", "lab"},
	} {
		r := do(t, tc.method, app.URL+tc.path, tc.body)
		if r.status != http.StatusBadRequest || r.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s %s: %d %s, want a 400 problem", tc.method, tc.path, tc.body, r.status, r.raw)
			continue
		}
		errs, _ := r.body["errors"].([]any)
		if len(errs) != 1 || errs[0].(map[string]any)["field"] != tc.field {
			t.Errorf("%s %s %s: errors %v, want one naming %s", tc.method, tc.path, tc.body, errs, tc.field)
		}
	}
	// A window of whole milliseconds that is not whole seconds is fine.
	labResults(t, do(t, "POST", app.URL+"/api/v1/lab/check", `{"lab":"x","limit":5,"windowMs":1500}`))
}

// TestLabStream: every lab request and reset reaches the lab's viewers on
// every instance; /ws/lab checks origins as /ws does.
func TestLabStream(t *testing.T) {
	url := redistest.URL(t)
	a := startApp(t, map[string]string{"REDIS_URL": url})
	b := startApp(t, map[string]string{"REDIS_URL": url})
	lab := newLab()
	onA := watchAt(t, a, "/ws/lab", "lab="+lab, nil)
	onB := watchAt(t, b, "/ws/lab", "lab="+lab, nil)
	if h := onB.next("hello", nil); h["lab"] != lab {
		t.Fatalf("hello: %v", h)
	}
	onB.next("viewers", func(m map[string]any) bool { return m["count"] == 2.0 })
	onA.next("viewers", func(m map[string]any) bool { return m["count"] == 2.0 })

	body := `{"lab":"` + lab + `","limit":3,"windowMs":10000}`
	r := do(t, "POST", a.URL+"/api/v1/lab/check", body)
	labResults(t, r)
	id := r.body["id"]
	for name, v := range map[string]*viewer{"A": onA, "B": onB} {
		m := v.next("lab", func(m map[string]any) bool { return m["id"] == id })
		if m["lab"] != lab || m["limit"] != 3.0 || m["windowMs"] != 10000.0 || m["nowMs"] != r.body["nowMs"] {
			t.Errorf("lab message on %s: %v, want the answer %s", name, m, r.raw)
		}
		if rs, _ := m["results"].([]any); len(rs) != len(labAlgorithms) {
			t.Errorf("lab message on %s: results %v", name, m["results"])
		}
	}
	do(t, "DELETE", b.URL+"/api/v1/lab?lab="+lab, "")
	onA.next("labReset", func(m map[string]any) bool { return m["lab"] == lab })
	onB.next("labReset", func(m map[string]any) bool { return m["lab"] == lab })

	// Another lab's viewers hear nothing of this one.
	other := watchAt(t, a, "/ws/lab", "lab="+newLab(), nil)
	other.next("hello", nil)
	do(t, "POST", a.URL+"/api/v1/lab/check", body)
	onA.next("lab", nil)
	select {
	case m := <-other.msgs:
		if m["type"] == "lab" {
			t.Errorf("another lab's viewer got %v", m)
		}
	case <-time.After(200 * time.Millisecond):
	}

	resp := do(t, "GET", a.URL+"/ws/lab?lab=x", "", "Origin", "https://evil.example", "Connection", "Upgrade", "Upgrade", "websocket")
	if resp.status != http.StatusForbidden {
		t.Errorf("foreign origin: %d %s, want 403", resp.status, resp.raw)
	}
	onA.conn.Close(websocket.StatusNormalClosure, "")
	onB.next("viewers", func(m map[string]any) bool { return m["count"] == 1.0 })
}

// TestLabPage: GET /lab preselects lab, limit and window, picks a random lab
// when none is named, and refuses bad values with a 400 naming the field.
func TestLabPage(t *testing.T) {
	app := startApp(t, nil)
	_, html := doRaw(t, "GET", app.URL+"/lab?lab=class-7&limit=7&window=30")
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(html))
	if err != nil {
		t.Fatal(err)
	}
	for sel, want := range map[string]string{`[data-testid="lab-limit"]`: "7", `[data-testid="lab-window"]`: "30", `[data-testid="lab-name"]`: "class-7"} {
		if got := doc.Find(sel).AttrOr("value", ""); got != want {
			t.Errorf("GET /lab?lab=class-7&limit=7&window=30: %s = %q, want %q", sel, got, want)
		}
	}
	_, a := doRaw(t, "GET", app.URL+"/lab")
	_, b := doRaw(t, "GET", app.URL+"/lab")
	re := regexp.MustCompile(`data-lab="([^"]+)"`)
	ma, mb := re.FindStringSubmatch(a), re.FindStringSubmatch(b)
	if ma == nil || mb == nil || ma[1] == mb[1] {
		t.Errorf("two visits without a lab name got labs %v and %v, want two random ones", ma, mb)
	}
	for q, field := range map[string]string{"limit=0": "limit", "limit=101": "limit", "window=61": "window", "window=0": "window", "lab=a%20b": "lab", "traffic=flood": "traffic"} {
		r := do(t, "GET", app.URL+"/lab?"+q, "")
		errs, _ := r.body["errors"].([]any)
		if r.status != http.StatusBadRequest || len(errs) != 1 || errs[0].(map[string]any)["field"] != field {
			t.Errorf("GET /lab?%s: %d %s, want 400 naming %s", q, r.status, r.raw, field)
		}
	}
}

// TestLabIsItsOwnSandbox: a lab never shares Redis keys with a configured
// window — even a policy named "lab" for a client key "lab:<name>" — so the
// lab's tokenless reset cannot empty a real window; and a bad cost is named
// even when the limit is bad too.
func TestLabIsItsOwnSandbox(t *testing.T) {
	app := startApp(t, nil, "--policy", "lab=5/1m", "--admin-token", "admin-secret")
	lab := newLab()
	if r := do(t, "POST", app.URL+"/api/v1/check?policy=lab&key=lab:"+lab, ""); r.status != http.StatusOK {
		t.Fatalf("check: %d %s", r.status, r.raw)
	}
	labResults(t, do(t, "POST", app.URL+"/api/v1/lab/check", `{"lab":"`+lab+`","limit":5,"windowMs":60000}`))
	if r := do(t, "DELETE", app.URL+"/api/v1/lab?lab="+lab, ""); r.status != http.StatusNoContent {
		t.Fatalf("lab reset: %d %s", r.status, r.raw)
	}
	r := do(t, "GET", app.URL+"/api/v1/window?policy=lab&key=lab:"+lab, "")
	if n := num(t, r, "count"); n != 1 {
		t.Fatalf("the real window holds %d after a lab's check and reset, want its own 1: %s", n, r.raw)
	}

	r = do(t, "POST", app.URL+"/api/v1/lab/check", `{"lab":"x","limit":0,"windowMs":10000,"cost":"abc"}`)
	var fields []string
	errs, _ := r.body["errors"].([]any)
	for _, e := range errs {
		fields = append(fields, e.(map[string]any)["field"].(string))
	}
	slices.Sort(fields)
	if r.status != http.StatusBadRequest || strings.Join(fields, ",") != "cost,limit" {
		t.Fatalf("bad limit and cost: %d, errors naming %v; want 400 naming limit and cost", r.status, fields)
	}
}

// TestLabGuard: one client's lab checks are bounded (3,000 a minute, in
// bursts of up to 3,000: a cell rate, which keeps one timestamp per client
// however many checks it counts); the next gets 429 with Retry-After and a
// problem document, counted, and no RateLimit fields of the guard ever
// reach a lab answer.
//
// On a real redis-server only: 3,000 lab checks of five scripts each take
// the embedded Redis on a loaded machine past the check timeout (503s).
func TestLabGuard(t *testing.T) {
	app := startApp(t, map[string]string{"REDIS_URL": redistest.RealURL(t)})
	lab := newLab()
	body := `{"lab":"` + lab + `","limit":100,"windowMs":1000}`
	const budget, workers, most = 3000, 16, 6000
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var sent atomic.Int64
	var denied atomic.Value // the first 429
	start := time.Now()
	for range workers {
		wg.Go(func() {
			c := &http.Client{}
			for sent.Add(1) <= most && denied.Load() == nil {
				resp, err := c.Post(app.URL+"/api/v1/lab/check", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.Header.Get("RateLimit") != "" {
					t.Errorf("a lab answer carries RateLimit %q", resp.Header.Get("RateLimit"))
				}
				if resp.StatusCode == http.StatusTooManyRequests {
					denied.CompareAndSwap(nil, response{status: resp.StatusCode, header: resp.Header, raw: string(b)})
				}
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	// The burst, and what the rate (50 a second) adds while it is sent.
	allowed := budget + int(took.Seconds()*budget/60) + workers
	if statuses[http.StatusOK] < budget || statuses[http.StatusOK] > allowed || len(statuses) != 2 {
		t.Fatalf("statuses %v in %v; want at least %d and at most %d answered 200, the rest 429", statuses, took, budget, allowed)
	}
	r, _ := denied.Load().(response)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("the first check beyond the budget: %d %v %s; want 429 with Retry-After and a problem document", r.status, r.header, r.raw)
	}
	if m := metrics(t, app); !strings.Contains(m, `ratescope_lab_refused_total{reason="client"} `) || strings.Contains(m, `ratescope_lab_refused_total{reason="client"} 0`+"\n") {
		t.Errorf("/metrics does not count the lab checks refused:\n%s", grepLines(m, "lab_refused"))
	}
}
