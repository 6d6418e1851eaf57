package httplimit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// TestShadowPasses: a shadow policy's would-denies reach the handler (SPEC
// §9) with the RateLimit fields and no Retry-After, the hook sees them as
// would-denies, and the decision body marks every shadow decision and the
// would-denies with their would-be retry.
func TestShadowPasses(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	key := "shadow-" + uuid.NewString()
	var seen []limiter.Decision
	mw := httplimit.New(lim, httplimit.WithTimeout(generous),
		httplimit.WithKey(func(*http.Request) (string, error) { return key, nil }),
		httplimit.WithOnDecision(func(d limiter.Decision) { seen = append(seen, d) }))
	p := mustPolicy(t, "watched=2/1m+shadow")
	b := &backend{}
	mux := http.NewServeMux()
	mux.Handle("/limited", mw.Limit(p)(b))
	pp := httplimit.Prepare(p)
	mux.HandleFunc("/check", func(w http.ResponseWriter, r *http.Request) {
		if res := mw.Check(w, r, httplimit.Target{Key: key, Policy: pp, Cost: 1}); res.Pass && res.Err == nil {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(httplimit.NewDecisionBody(res.Decision))
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for i := 1; i <= 4; i++ {
		a := get(t, srv.URL+"/limited")
		if a.status != 200 || a.body != "backend" || a.header.Get("Retry-After") != "" {
			t.Fatalf("request %d: %d %v %s; want 200 from the backend without Retry-After", i, a.status, a.header, a.body)
		}
		if got := a.header.Get("RateLimit-Policy"); got != `"watched";q=2;w=60` {
			t.Fatalf("request %d: RateLimit-Policy = %q", i, got)
		}
	}
	if b.n.Load() != 4 {
		t.Fatalf("backend reached %d times, want 4", b.n.Load())
	}
	if len(seen) != 4 || !seen[0].Allowed || !seen[1].Allowed || !seen[2].WouldDeny() || !seen[3].WouldDeny() {
		t.Fatalf("the hook saw %+v; want 2 allowed, then 2 would-denies", seen)
	}

	a := get(t, srv.URL+"/check")
	var body map[string]any
	if err := json.Unmarshal([]byte(a.body), &body); err != nil {
		t.Fatalf("%d %s: %v", a.status, a.body, err)
	}
	if a.status != 200 || a.header.Get("Retry-After") != "" || body["allowed"] != true || body["shadow"] != true ||
		body["wouldDeny"] != true || body["id"] != nil || body["remaining"] != 0.0 {
		t.Fatalf("would-deny answer: %d %v %s", a.status, a.header, a.body)
	}
	if r, _ := body["retryAfterMs"].(float64); r <= 0 || r > 60000 {
		t.Fatalf("retryAfterMs = %v, want the would-be retry in (0, 60000]", body["retryAfterMs"])
	}
}

// TestShadowBodyFlags: the decision body's flags are omitted unless set, and
// an allowed shadow decision is marked shadow but not wouldDeny.
func TestShadowBodyFlags(t *testing.T) {
	rules := []limiter.RuleState{{Limit: 5, WindowMs: 1000, Count: 1, Remaining: 4, OldestMs: -1}}
	for _, tc := range []struct {
		name string
		d    limiter.Decision
		want map[string]any // the flags and allowed
	}{
		{"allowed", limiter.Decision{Allowed: true, Rules: rules}, map[string]any{"allowed": true}},
		{"denied", limiter.Decision{Rules: rules, RetryAfterMs: 5}, map[string]any{"allowed": false}},
		{"cached", limiter.Decision{Rules: rules, RetryAfterMs: 5, Cached: true}, map[string]any{"allowed": false, "cached": true}},
		{"shadow allowed", limiter.Decision{Allowed: true, Shadow: true, Rules: rules}, map[string]any{"allowed": true, "shadow": true}},
		{"would deny", limiter.Decision{Shadow: true, Rules: rules, RetryAfterMs: 5}, map[string]any{"allowed": true, "shadow": true, "wouldDeny": true}},
		{"cached would deny", limiter.Decision{Shadow: true, Cached: true, Rules: rules, RetryAfterMs: 5},
			map[string]any{"allowed": true, "shadow": true, "wouldDeny": true, "cached": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(httplimit.NewDecisionBody(tc.d))
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			json.Unmarshal(b, &got)
			for _, k := range []string{"allowed", "cached", "shadow", "wouldDeny"} {
				if got[k] != tc.want[k] {
					t.Errorf("%s = %v, want %v in %s", k, got[k], tc.want[k], b)
				}
			}
		})
	}
}
