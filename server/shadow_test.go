package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// TestShadowPolicyOverHTTP (SPEC §9): a +shadow policy hit limit+5 times never
// answers 429; its over-limit answers are 200 would-denies with the would-be
// retry and no Retry-After, recorded nowhere (the window holds exactly limit
// entries), counted as shadow_denied, and streamed marked shadow/wouldDeny.
func TestShadowPolicyOverHTTP(t *testing.T) {
	const limit = 5
	app := startApp(t, nil, "--policy", fmt.Sprintf("watched=%d/1m+shadow", limit))
	key := newKey()
	v := watch(t, app, "policy=watched&key="+key, nil)
	v.next("snapshot", nil) // watching before the first check

	u := app.URL + "/api/v1/check?policy=watched&key=" + key
	for i := 1; i <= limit+5; i++ {
		r := do(t, "POST", u, "")
		if r.status != 200 || r.header.Get("Retry-After") != "" || r.header.Get("RateLimit") == "" ||
			r.body["allowed"] != true || r.body["shadow"] != true {
			t.Fatalf("check %d: %d %v %s; want a 200 marked shadow, RateLimit and no Retry-After", i, r.status, r.header, r.raw)
		}
		if i <= limit {
			if _, ok := r.body["wouldDeny"]; ok || r.body["id"] == nil || num(t, r, "retryAfterMs") != 0 {
				t.Fatalf("check %d (within the limit): %s", i, r.raw)
			}
			continue
		}
		if r.body["wouldDeny"] != true || r.body["id"] != nil || num(t, r, "retryAfterMs") <= 0 || num(t, r, "remaining") != 0 {
			t.Fatalf("check %d (over the limit): %s; want wouldDeny with a positive retryAfterMs", i, r.raw)
		}
	}

	if w := do(t, "GET", app.URL+"/api/v1/window?policy=watched&key="+key, ""); w.status != 200 || num(t, w, "count") != limit {
		t.Fatalf("window after %d checks: %s; want exactly %d entries (would-denies are not recorded)", limit+5, w.raw, limit)
	}
	m := metrics(t, app)
	for _, line := range []string{
		fmt.Sprintf(`ratescope_decisions_total{outcome="allowed",policy="watched"} %d`, limit),
		`ratescope_decisions_total{outcome="denied",policy="watched"} 0`,
		`ratescope_decisions_total{outcome="shadow_denied",policy="watched"} 5`,
	} {
		if !strings.Contains(m, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}

	for i := 1; i <= limit+5; i++ {
		d := v.next("decision", nil)
		if d["allowed"] != true || d["shadow"] != true || (d["wouldDeny"] == true) != (i > limit) {
			t.Fatalf("decision message %d: %v; want allowed, shadow, wouldDeny only over the limit", i, d)
		}
		if i > limit && d["retryAfterMs"].(float64) <= 0 {
			t.Fatalf("decision message %d: %v; want the would-be retry", i, d)
		}
	}
}

// deniedUntilCached checks key under policy on app until the local deny
// cache answers (its subscription to resets comes up just after start-up)
// and returns that answer; every answer on the way must be a 429 whose retry
// is no longer than the first's.
func deniedUntilCached(t *testing.T, app *apptest.App, policy, key string) (first, cached response) {
	t.Helper()
	u := app.URL + "/api/v1/check?policy=" + policy + "&key=" + key
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		r := do(t, "POST", u, "")
		if r.status != 429 || r.header.Get("Retry-After") == "" || r.body["allowed"] != false {
			t.Fatalf("denial %d: %d %v %s", i, r.status, r.header, r.raw)
		}
		if i == 0 {
			first = r
		} else if num(t, r, "retryAfterMs") > num(t, first, "retryAfterMs") {
			t.Fatalf("denial %d: retryAfterMs %d after %d", i, num(t, r, "retryAfterMs"), num(t, first, "retryAfterMs"))
		}
		if r.body["cached"] == true {
			if i == 0 {
				t.Fatalf("the first denial came from the cache: %s", r.raw)
			}
			return first, r
		}
		if _, ok := r.body["cached"]; ok {
			t.Fatalf("denial %d: cached must be true or absent: %s", i, r.raw)
		}
		if time.Now().After(deadline) {
			t.Fatal("the local deny cache never answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCachedDenialOverHTTP: a denial on a full window is answered by the
// local deny cache as a 429 marked cached, with a retry no longer than
// Redis's, and streamed to viewers marked cached.
func TestCachedDenialOverHTTP(t *testing.T) {
	app := startApp(t, nil, "--policy", "full=2/1m")
	key := newKey()
	v := watch(t, app, "policy=full&key="+key, nil)
	v.next("snapshot", nil)
	for range 2 {
		if r := do(t, "POST", app.URL+"/api/v1/check?policy=full&key="+key, ""); r.status != 200 {
			t.Fatalf("filling: %d %s", r.status, r.raw)
		}
	}
	first, cached := deniedUntilCached(t, app, "full", key)
	if cached.body["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" ||
		num(t, cached, "retryAfterMs") <= 0 || num(t, cached, "count") != 2 || cached.body["shadow"] != nil {
		t.Fatalf("cached denial %s (first: %s)", cached.raw, first.raw)
	}
	d := v.next("decision", func(m map[string]any) bool { return m["cached"] == true })
	if d["allowed"] != false || d["retryAfterMs"].(float64) <= 0 || d["shadow"] != nil || d["wouldDeny"] != nil {
		t.Fatalf("cached decision message %v", d)
	}
}

// TestResetClearsCacheAcrossInstances: a reset through instance B clears
// instance A's cached denial within a second, so A's next check is decided by
// Redis — and allowed, the window being empty.
func TestResetClearsCacheAcrossInstances(t *testing.T) {
	url := redistest.URL(t)
	env := func() map[string]string { return map[string]string{"REDIS_URL": url} }
	args := []string{"--policy", "full=2/1m", "--admin-token", "tok"}
	a := startApp(t, env(), args...)
	b := startApp(t, env(), args...)
	key := newKey()
	for range 2 {
		if r := do(t, "POST", a.URL+"/api/v1/check?policy=full&key="+key, ""); r.status != 200 {
			t.Fatalf("filling: %d %s", r.status, r.raw)
		}
	}
	deniedUntilCached(t, a, "full", key)

	if r := do(t, "DELETE", b.URL+"/api/v1/window?policy=full&key="+key, "", "Authorization", "Bearer tok"); r.status != 204 {
		t.Fatalf("reset through B: %d %s", r.status, r.raw)
	}
	reset := time.Now()
	for {
		r := do(t, "POST", a.URL+"/api/v1/check?policy=full&key="+key, "")
		if r.status == 200 {
			if r.body["cached"] != nil || r.body["id"] == nil {
				t.Fatalf("after the reset: %s", r.raw)
			}
			t.Logf("A allowed %v after the reset through B", time.Since(reset))
			return
		}
		if r.status != 429 || r.body["cached"] != true {
			t.Fatalf("after the reset: %d %s; want A's cached denial until it hears of the reset, then 200", r.status, r.raw)
		}
		if time.Since(reset) > time.Second {
			t.Fatalf("A still answers from its cache %v after the reset through B: %s", time.Since(reset), r.raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForwardAuthShadowRoute: forward auth on a shadow policy (shadow: true
// in the config file) lets every request pass with 200 and its RateLimit
// fields, never Retry-After; the would-denies are counted as such.
func TestForwardAuthShadowRoute(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, `
policies:
  - name: trial
    rules: ["2/1m"]
    shadow: true
routes:
  - match: {pathPrefix: /trial}
    policy: trial
    key: ip
    denyStatus: 403
`))
	for i := 1; i <= 4; i++ {
		r := fa(t, app, "/forward-auth/trial")
		if r.status != 200 || r.raw != "" || r.header.Get("Retry-After") != "" ||
			r.header.Get("RateLimit") != fmt.Sprintf(`"trial";r=%d;t=60`, max(0, 2-i)) {
			t.Fatalf("request %d: %d %v %q; want 200 with RateLimit and no Retry-After", i, r.status, r.header, r.raw)
		}
	}
	if m := metrics(t, app); !strings.Contains(m, `ratescope_decisions_total{outcome="shadow_denied",policy="trial"} 2`+"\n") {
		t.Fatal("/metrics does not count the 2 would-denies as shadow_denied")
	}
}
