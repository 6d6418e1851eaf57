package server_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
)

func jsonString(t testing.TB, raw []byte, member string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	s, _ := m[member].(string)
	return s
}

func leaseURL(app *apptest.App, policy, key, id, action string) string {
	u := app.URL + "/api/v1/leases"
	if id != "" {
		u += "/" + id
	}
	if action != "" {
		u += "/" + action
	}
	return u + "?policy=" + policy + "&key=" + key
}

func member(r response, name string) int64 {
	f, _ := r.body[name].(float64)
	return int64(f)
}

// metricSum adds the samples of a series over the instances, e.g.
// ratescope_leases_total{event="acquired",policy="jobs"}.
func metricSum(t testing.TB, series string, apps ...*apptest.App) float64 {
	t.Helper()
	re := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(series) + ` (\S+)$`)
	sum := 0.0
	for _, a := range apps {
		if m := re.FindStringSubmatch(metrics(t, a)); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			sum += v
		}
	}
	return sum
}

// fieldOf is the one field a problem document names.
func fieldOf(r response) string {
	errs, _ := r.body["errors"].([]any)
	if len(errs) != 1 {
		return fmt.Sprintf("%d errors", len(errs))
	}
	e, _ := errs[0].(map[string]any)
	s, _ := e["field"].(string)
	return s
}

// TestLeasesOverHTTPAcrossInstances: 200 concurrent acquires on two
// instances hold exactly 4 leases of 4/inflight; the others get 429 with
// Retry-After, the time until the earliest lease ends rounded up; a
// release on one instance frees a slot for the other at once; a release
// twice answers 204 twice; a renew moves the expiry; the metrics count it.
func TestLeasesOverHTTPAcrossInstances(t *testing.T) {
	a, b := twoInstances(t, nil, "--policy", "jobs=4/inflight+lease=1m")
	key := newKey()
	answers := make([]response, 200)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		app := []*apptest.App{a, b}[i%2]
		wg.Go(func() {
			<-start
			answers[i] = do(t, "POST", leaseURL(app, "jobs", key, "", ""), "")
		})
	}
	close(start)
	wg.Wait()
	var held []response
	for _, r := range answers {
		switch r.status {
		case 200:
			held = append(held, r)
			if r.body["key"] != key || r.body["policy"] != "jobs" || member(r, "limit") != 4 || member(r, "expiresMs") != member(r, "nowMs")+60_000 {
				t.Errorf("a lease: %s", r.raw)
			}
		case 429:
			ms := member(r, "retryAfterMs")
			if ms <= 0 || ms > 60_000 || r.header.Get("Retry-After") != strconv.FormatInt((ms+999)/1000, 10) ||
				member(r, "inFlight") != 4 || r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("a refusal: %v %s", r.header, r.raw)
			}
		default:
			t.Fatalf("an acquire: %d %s", r.status, r.raw)
		}
	}
	if len(held) != 4 {
		t.Fatalf("%d of 200 concurrent acquires on two instances held a lease of 4/inflight", len(held))
	}
	first := jsonString(t, []byte(held[0].raw), "leaseId")
	for range 2 {
		if r := do(t, "DELETE", leaseURL(b, "jobs", key, first, ""), ""); r.status != 204 || r.raw != "" {
			t.Fatalf("release: %d %s", r.status, r.raw)
		}
	}
	if r := do(t, "POST", leaseURL(a, "jobs", key, "", ""), ""); r.status != 200 || member(r, "inFlight") != 4 {
		t.Fatalf("acquire right after a release on the other instance: %d %s", r.status, r.raw)
	}
	second := jsonString(t, []byte(held[1].raw), "leaseId")
	r := do(t, "POST", leaseURL(b, "jobs", key, second, "renew"), "")
	if r.status != 200 || jsonString(t, []byte(r.raw), "leaseId") != second || member(r, "expiresMs") != member(r, "nowMs")+60_000 || member(r, "expiresMs") <= member(held[1], "expiresMs") {
		t.Fatalf("renew: %d %s", r.status, r.raw)
	}
	for event, want := range map[string]float64{"acquired": 5, "refused": 196, "released": 1, "renewed": 1} {
		if got := metricSum(t, `ratescope_leases_total{event="`+event+`",policy="jobs"}`, a, b); got != want {
			t.Errorf("leases %s: %v, want %v", event, got, want)
		}
	}
	if got := metricSum(t, `ratescope_leases_held{policy="jobs"}`, a, b); got != 4 {
		t.Errorf("leases held over both instances: %v, want 4", got)
	}
}

// TestLeaseEndsByItselfOverHTTP: a holder that never releases frees its
// slot when its lease ends, on Redis's clock: every acquire before its end
// is refused, the first after it is granted, and the lease counts as
// expired; renewing it then answers 404.
func TestLeaseEndsByItselfOverHTTP(t *testing.T) {
	app := startApp(t, nil, "--policy", "one=1/inflight+lease=1s")
	key := newKey()
	first := do(t, "POST", leaseURL(app, "one", key, "", ""), "")
	if first.status != 200 {
		t.Fatalf("acquire: %d %s", first.status, first.raw)
	}
	end := member(first, "expiresMs")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := do(t, "POST", leaseURL(app, "one", key, "", ""), "")
		if r.status == 200 {
			if now := member(r, "nowMs"); now < end {
				t.Fatalf("granted at %d, before the lease's end %d", now, end)
			} else if now > end+50 {
				t.Logf("the first acquire after the lease's end came %d ms late (a loaded machine)", now-end)
			}
			break
		}
		if r.status != 429 || member(r, "nowMs") >= end+1000 || time.Now().After(deadline) {
			t.Fatalf("refused after the lease's end %d: %d %s", end, r.status, r.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := metricSum(t, `ratescope_leases_total{event="expired",policy="one"}`, app); got != 1 {
		t.Errorf("expired leases: %v, want 1", got)
	}
	id := jsonString(t, []byte(first.raw), "leaseId")
	if r := do(t, "POST", leaseURL(app, "one", key, id, "renew"), ""); r.status != 404 || fieldOf(r) != "leaseId" {
		t.Fatalf("renew past the lease's end: %d %s", r.status, r.raw)
	}
}

// TestLeaseBadInput: a malformed lease id, a missing key, an inflight rule
// beside a window in an override — each 400 naming the field; a check of
// an inflight policy and a lease of a window policy — 409 naming policy.
func TestLeaseBadInput(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "jobs=2/inflight", "--policy", "win=5/1m")
	key := newKey()
	for _, tc := range []struct {
		method, url, body, field string
		status                   int
	}{
		{"POST", leaseURL(app, "jobs", key, "not-a-lease", "renew"), "", "leaseId", 400},
		{"DELETE", leaseURL(app, "jobs", key, "9B2F1C4E-3A5D-4E6F-8A7B-0C1D2E3F4A5B", ""), "", "leaseId", 400},
		{"DELETE", leaseURL(app, "jobs", key, strings.Repeat("a", 300), ""), "", "leaseId", 400},
		{"POST", app.URL + "/api/v1/leases?policy=jobs", "", "key", 400},
		{"POST", app.URL + "/api/v1/leases", `{"key":"bad key","policy":"jobs"}`, "key", 400},
		{"POST", leaseURL(app, "nope", key, "", ""), "", "policy", 400},
		{"POST", leaseURL(app, "win", key, "", ""), "", "policy", 409},
		{"POST", app.URL + "/api/v1/check?policy=jobs&key=" + key, "", "policy", 409},
		{"PUT", app.URL + "/api/v1/overrides?policy=jobs&key=" + key, `{"rules":["4/inflight","10/1m"]}`, "rules[1]", 400},
		{"PUT", app.URL + "/api/v1/overrides?policy=win&key=" + key, `{"rules":["4/inflight"]}`, "rules[0]", 400},
	} {
		r := do(t, tc.method, tc.url, tc.body, "Authorization", "Bearer adm")
		if r.status != tc.status || fieldOf(r) != tc.field {
			t.Errorf("%s %s %s: %d %s, want %d naming %s", tc.method, tc.url, tc.body, r.status, r.raw, tc.status, tc.field)
		}
	}
}

// TestLeaseOverride: an override of an inflight policy gives one client
// its own limit of leases.
func TestLeaseOverride(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "jobs=1/inflight")
	key := newKey()
	if r := do(t, "PUT", app.URL+"/api/v1/overrides?policy=jobs&key="+key, `{"rules":["3/inflight"]}`, "Authorization", "Bearer adm"); r.status != 200 {
		t.Fatalf("override: %d %s", r.status, r.raw)
	}
	waitFor(t, 10*time.Second, "the override in force", func() bool {
		r := do(t, "GET", app.URL+"/api/v1/overrides?policy=jobs&key="+key, "", "Authorization", "Bearer adm")
		return r.status == 200
	})
	held := 0
	for range 5 {
		r := do(t, "POST", leaseURL(app, "jobs", key, "", ""), "")
		if r.status == 200 {
			held++
			if member(r, "limit") != 3 || r.body["override"] != "key" {
				t.Fatalf("a lease under the override: %s", r.raw)
			}
		}
	}
	if held != 3 {
		t.Fatalf("%d leases under an override of 3", held)
	}
}

// TestLeasesLive: a viewer of an inflight key sees each lease acquired and
// released, and the window (GET and the snapshot) lists the live leases.
func TestLeasesLive(t *testing.T) {
	app := startApp(t, nil, "--policy", "jobs=2/inflight+lease=30s")
	key := newKey()
	v := watch(t, app, "policy=jobs&key="+key, nil)
	v.next("hello", nil)
	r := do(t, "POST", leaseURL(app, "jobs", key, "", ""), "")
	id := jsonString(t, []byte(r.raw), "leaseId")
	m := v.next("lease", func(m map[string]any) bool { return m["kind"] == "acquired" })
	if m["leaseId"] != id || m["key"] != key || m["expiresMs"] != float64(member(r, "expiresMs")) || m["startMs"] != float64(member(r, "nowMs")) {
		t.Fatalf("lease message %v for %s", m, r.raw)
	}
	s := v.next("snapshot", func(m map[string]any) bool { ls, _ := m["leases"].([]any); return len(ls) == 1 })
	if l := s["leases"].([]any)[0].(map[string]any); l["id"] != id || l["expiresMs"] != m["expiresMs"] || s["algorithm"] != "inflight" || s["count"] != 1.0 {
		t.Fatalf("snapshot %v", s)
	}
	w := do(t, "GET", app.URL+"/api/v1/window?policy=jobs&key="+key, "")
	if ls, _ := w.body["leases"].([]any); w.status != 200 || len(ls) != 1 || member(w, "windowMs") != 30_000 || member(w, "limit") != 2 {
		t.Fatalf("window: %d %s", w.status, w.raw)
	}
	do(t, "DELETE", leaseURL(app, "jobs", key, id, ""), "")
	v.next("lease", func(m map[string]any) bool {
		return m["kind"] == "released" && m["leaseId"] == id && m["inFlight"] == 0.0
	})
}
