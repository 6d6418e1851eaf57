package httplimit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// TestQuotaAnswers: a calendar quota's rule is named "<policy>/month" in
// RateLimit headers and violated-policies, with w the length of the month
// holding now (which the decision reports) and t the seconds to its end;
// the body names its period instead of a window, and a denial by it waits
// until the month's end, rounded up in Retry-After.
func TestQuotaAnswers(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	key := "quota-" + uuid.NewString()
	var decisions []limiter.Decision
	var mu sync.Mutex
	mw := httplimit.New(lim, httplimit.WithTimeout(generous),
		httplimit.WithKey(func(*http.Request) (string, error) { return key, nil }),
		httplimit.WithOnDecision(func(d limiter.Decision) { mu.Lock(); decisions = append(decisions, d); mu.Unlock() }))
	mux := http.NewServeMux()
	mux.Handle("/plan", mw.Limit(mustPolicy(t, "plan=10/1s,2/month+tz=Europe/Berlin"))(&backend{}))
	mux.Handle("/solo", mw.Limit(mustPolicy(t, "solo=1/week"))(&backend{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	last := func() limiter.Decision {
		mu.Lock()
		defer mu.Unlock()
		return decisions[len(decisions)-1]
	}
	for i := 1; i <= 3; i++ {
		a := get(t, srv.URL+"/plan")
		d := last()
		m := d.Rules[1]
		if m.Period != limiter.Month || m.PeriodMs < 672*3_600_000 || m.PeriodMs > 745*3_600_000 {
			t.Fatalf("the month's rule: %+v", m)
		}
		wantPolicy := fmt.Sprintf(`"plan/1";q=10;w=1, "plan/month";q=2;w=%d`, m.PeriodMs/1000)
		wantLimit := fmt.Sprintf(`"plan/1";r=%d;t=1, "plan/month";r=%d;t=%d`, d.Rules[0].Remaining, max(0, 2-i), (m.ResetMs+999)/1000)
		if got := a.header.Get("RateLimit-Policy"); got != wantPolicy {
			t.Fatalf("check %d: RateLimit-Policy %q, want %q", i, got, wantPolicy)
		}
		if got := a.header.Get("RateLimit"); got != wantLimit {
			t.Fatalf("check %d: RateLimit %q, want %q", i, got, wantLimit)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(a.body), &doc); i == 3 && err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			if a.status != 200 {
				t.Fatalf("check %d: %d %s", i, a.status, a.body)
			}
			continue
		}
		rules := doc["rules"].([]any)
		month := rules[1].(map[string]any)
		if a.status != 429 || doc["period"] != "month" || doc["windowMs"] != 0.0 || doc["limit"] != 2.0 || doc["oldestMs"] != nil ||
			int64(doc["retryAfterMs"].(float64)) != m.ResetMs || a.header.Get("Retry-After") != httplimit.RetryAfter(m.ResetMs) ||
			month["period"] != "month" || month["windowMs"] != nil || month["count"] != 2.0 || rules[0].(map[string]any)["windowMs"] != 1000.0 {
			t.Fatalf("the denial: %d %v %s", a.status, a.header, a.body)
		}
		if vp := doc["violated-policies"].([]any); len(vp) != 1 || vp[0] != "plan/month" {
			t.Fatalf("violated-policies %v", vp)
		}
	}
	// One rule, and a quota: still named for its period.
	a := get(t, srv.URL+"/solo")
	d := last()
	if got, want := a.header.Get("RateLimit-Policy"), fmt.Sprintf(`"solo/week";q=1;w=%d`, d.Rules[0].PeriodMs/1000); a.status != 200 || got != want {
		t.Fatalf("solo: %d, RateLimit-Policy %q, want %q", a.status, got, want)
	}
}
