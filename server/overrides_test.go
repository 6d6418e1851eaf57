package server_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// admin is the admin token of these tests' servers.
var admin = []string{"Authorization", "Bearer adm"}

// overrideURL is /api/v1/overrides with policy and the other parameters,
// escaped.
func overrideURL(app *apptest.App, policy string, kv ...string) string {
	q := url.Values{"policy": {policy}}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return app.URL + "/api/v1/overrides?" + q.Encode()
}

// putOverride sets an override (who: "key" or "prefix") and wants 200.
func putOverride(t testing.TB, app *apptest.App, policy, who, value, body string) response {
	t.Helper()
	r := do(t, "PUT", overrideURL(app, policy, who, value), body, admin...)
	if r.status != 200 {
		t.Fatalf("PUT override %s=%s: %d %s", who, value, r.status, r.raw)
	}
	return r
}

// matchOf is which override app applies to key: "key", "prefix" or "none".
func matchOf(t testing.TB, app *apptest.App, policy, key string) response {
	t.Helper()
	r := do(t, "GET", overrideURL(app, policy, "key", key), "", admin...)
	if r.status != 200 {
		t.Fatalf("GET override of %s: %d %s", key, r.status, r.raw)
	}
	return r
}

// check checks once on app and wants 200 or 429.
func check(t testing.TB, app *apptest.App, policy, key string) response {
	t.Helper()
	r := do(t, "POST", app.URL+"/api/v1/check?"+url.Values{"policy": {policy}, "key": {key}}.Encode(), "")
	if r.status != 200 && r.status != 429 {
		t.Fatalf("check %s: %d %s", key, r.status, r.raw)
	}
	return r
}

// TestOverrideAcrossInstancesAndRestarts: an override set on one instance
// governs checks on another within a second — limit, RateLimit-Policy and
// the answer's "override" — and survives both instances restarting. A
// Redis Cluster too.
func TestOverrideAcrossInstancesAndRestarts(t *testing.T) {
	for name, redisURL := range map[string]func(t *testing.T) string{
		"standalone": func(t *testing.T) string { return redistest.RealURL(t) },
		"cluster":    func(t *testing.T) string { return redistest.StartCluster(t).URL },
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{"REDIS_URL": redisURL(t), "RATESCOPE_ADMIN_TOKEN": "adm"}
			start := func() *apptest.App { return startApp(t, env, "--policy", "ov=2/1m") }
			a, b := start(), start()
			key := newKey()
			r := putOverride(t, a, "ov", "key", key, `{"rules":["5/1m"],"note":"gold"}`)
			if !strings.HasPrefix(r.raw, `{"policy":"ov","key":"`+key+`","rules":[{"limit":5,"windowMs":60000}],"note":"gold","updatedMs":`) ||
				time.Since(time.UnixMilli(num(t, r, "updatedMs"))).Abs() > time.Hour {
				t.Fatalf("PUT answered %s", r.raw)
			}
			set := time.Now()
			waitFor(t, time.Second, "the other instance applying the override", func() bool { return matchOf(t, b, "ov", key).body["match"] == "key" })
			t.Logf("applied on the other instance within %v", time.Since(set))
			for i := range 5 {
				r := check(t, b, "ov", key)
				if r.status != 200 || num(t, r, "limit") != 5 || r.body["override"] != "key" || r.header.Get("RateLimit-Policy") != `"ov";q=5;w=60` {
					t.Fatalf("check %d on the other instance: %d %v %s", i+1, r.status, r.header, r.raw)
				}
			}
			if r := check(t, a, "ov", key); r.status != 429 || r.body["override"] != "key" || num(t, r, "count") != 5 {
				t.Fatalf("the sixth: %d %s", r.status, r.raw)
			}
			other := newKey()
			if r := check(t, b, "ov", other); num(t, r, "limit") != 2 || r.body["override"] != nil {
				t.Fatalf("a key without an override: %s", r.raw)
			}

			for _, app := range []*apptest.App{a, b} {
				if err := app.Stop(); err != nil {
					t.Fatal(err)
				}
			}
			a, b = start(), start()
			for _, app := range []*apptest.App{a, b} {
				waitFor(t, 5*time.Second, "a restarted instance reading the overrides", func() bool { return matchOf(t, app, "ov", key).body["match"] == "key" })
			}
			if r := check(t, b, "ov", key); r.status != 429 || num(t, r, "limit") != 5 || r.body["override"] != "key" {
				t.Fatalf("after restarting: %d %s", r.status, r.raw)
			}
		})
	}
}

// TestOverridePrecedence: a key's own override beats a prefix's, the
// longest matching prefix beats a shorter one, and any override beats the
// policy — in what GET answers and in what checks decide.
func TestOverridePrecedence(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "pr=2/1m")
	tag := newKey() + ":"
	putOverride(t, app, "pr", "prefix", tag, `{"rules":["3/1m"]}`)
	putOverride(t, app, "pr", "prefix", tag+"eu:", `{"rules":["4/1m"],"note":"eu"}`)
	putOverride(t, app, "pr", "key", tag+"eu:7", `{"rules":["6/1m"]}`)
	for _, c := range []struct {
		key, match, prefix, override string
		limit                        int64
	}{
		{tag + "eu:7", "key", "", "key", 6},
		{tag + "eu:8", "prefix", tag + "eu:", "prefix:" + tag + "eu:", 4},
		{tag + "us:1", "prefix", tag, "prefix:" + tag, 3},
		{"elsewhere-" + tag, "none", "", "", 2},
	} {
		r := matchOf(t, app, "pr", c.key)
		rules, _ := r.body["rules"].([]any)
		if r.body["match"] != c.match || (c.prefix != "" && r.body["prefix"] != c.prefix) || len(rules) != 1 ||
			rules[0].(map[string]any)["limit"] != float64(c.limit) {
			t.Errorf("GET ?key=%s: %s; want match %s, prefix %q, limit %d", c.key, r.raw, c.match, c.prefix, c.limit)
		}
		r = check(t, app, "pr", c.key)
		if got, _ := r.body["override"].(string); got != c.override || num(t, r, "limit") != c.limit {
			t.Errorf("check %s: %s; want override %q, limit %d", c.key, r.raw, c.override, c.limit)
		}
	}
}

// TestOverrideChangesAreExact: the log keeps its entries across a change.
// A raised limit admits at once, exactly up to the new limit; a lowered one
// denies until enough entries slide out, with the exact retry time on
// Redis's clock; a deleted override restores the policy.
func TestOverrideChangesAreExact(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "ex=2/3s")
	key := newKey()
	var last int64 // the newest entry's score
	allow := func(what string, count, limit int64) {
		t.Helper()
		r := check(t, app, "ex", key)
		if r.status != 200 || num(t, r, "count") != count || num(t, r, "limit") != limit {
			t.Fatalf("%s: %d %s; want allowed, count %d of %d", what, r.status, r.raw, count, limit)
		}
		last = num(t, r, "nowMs")
	}
	allow("first", 1, 2)
	allow("second", 2, 2)
	if r := check(t, app, "ex", key); r.status != 429 {
		t.Fatalf("third under 2/3s: %s", r.raw)
	}
	putOverride(t, app, "ex", "key", key, `{"rules":["4/3s"]}`)
	allow("at once after raising to 4", 3, 4)
	allow("the fourth", 4, 4)
	if r := check(t, app, "ex", key); r.status != 429 || num(t, r, "count") != 4 {
		t.Fatalf("fifth under 4/3s: %s", r.raw)
	}
	putOverride(t, app, "ex", "key", key, `{"rules":["1/3s"]}`)
	r := check(t, app, "ex", key)
	// Four entries and room for one: all four must slide out, the newest last.
	if want := last + 3000 - num(t, r, "nowMs"); r.status != 429 || num(t, r, "retryAfterMs") != want || r.body["override"] != "key" {
		t.Fatalf("lowered to 1/3s: %s; want 429 with retryAfterMs %d", r.raw, want)
	}
	time.Sleep(time.Duration(num(t, r, "retryAfterMs")) * time.Millisecond)
	allow("once the log drained", 1, 1)

	if r := do(t, "DELETE", overrideURL(app, "ex", "key", key), "", admin...); r.status != 204 {
		t.Fatalf("DELETE: %d %s", r.status, r.raw)
	}
	if r := do(t, "DELETE", overrideURL(app, "ex", "key", key), "", admin...); r.status != 404 {
		t.Fatalf("DELETE again: %d %s", r.status, r.raw)
	}
	if r := matchOf(t, app, "ex", key); r.body["match"] != "none" {
		t.Fatalf("after DELETE: %s", r.raw)
	}
	allow("the policy again", 2, 2)
	if r := check(t, app, "ex", key); r.status != 429 || r.body["override"] != nil || r.header.Get("RateLimit-Policy") != `"ex";q=2;w=3` {
		t.Fatalf("after DELETE the policy decides: %d %v %s", r.status, r.header, r.raw)
	}
}

// TestOverrideDropsCachedDenials: a cached denial of a key is not served
// once an override changes its rules; and a change announced by another
// instance drops this instance's cached denial of that key, so one made
// under rules that come back later (an override set and removed while the
// other instance recorded more) is not served with a retry time the log no
// longer bears out.
func TestOverrideDropsCachedDenials(t *testing.T) {
	a, b := twoInstances(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "dc=2/1m")
	denyCached := func(key string) {
		t.Helper()
		for range 2 {
			check(t, a, "dc", key)
		}
		if r := check(t, a, "dc", key); r.status != 429 {
			t.Fatalf("third: %s", r.raw)
		}
		if r := check(t, a, "dc", key); r.status != 429 || r.body["cached"] != true {
			t.Fatalf("fourth, from the deny cache: %s", r.raw)
		}
	}
	seen := func(app *apptest.App, key, match string) {
		t.Helper()
		waitFor(t, time.Second, "instance applying the change", func() bool { return matchOf(t, app, "dc", key).body["match"] == match })
	}

	raised := newKey()
	denyCached(raised)
	putOverride(t, b, "dc", "key", raised, `{"rules":["3/1m"]}`)
	seen(a, raised, "key")
	if r := check(t, a, "dc", raised); r.status != 200 || r.body["cached"] != nil || num(t, r, "count") != 3 {
		t.Fatalf("after raising, the cached denial was served: %s", r.raw)
	}

	back := newKey()
	denyCached(back)
	putOverride(t, b, "dc", "key", back, `{"rules":["4/1m"]}`)
	seen(a, back, "key")
	third := num(t, check(t, b, "dc", back), "nowMs")
	check(t, b, "dc", back)
	if r := do(t, "DELETE", overrideURL(b, "dc", "key", back), "", admin...); r.status != 204 {
		t.Fatalf("DELETE: %s", r.raw)
	}
	seen(a, back, "none")
	// Four entries under 2/1m: room for one once three slid out.
	r := check(t, a, "dc", back)
	if want := third + 60000 - num(t, r, "nowMs"); r.status != 429 || r.body["cached"] != nil || num(t, r, "retryAfterMs") != want {
		t.Fatalf("under the policy's rules again: %s; want a denial from Redis with retryAfterMs %d", r.raw, want)
	}
}

// TestOverrideBoundsCost: a check's cost, and a settle's, is bounded by the
// rules in force for its key: an override's smallest limit, not the
// policy's.
func TestOverrideBoundsCost(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "bc=2/1m")
	key := newKey()
	putOverride(t, app, "bc", "key", key, `{"rules":["6/1m"]}`)
	q := url.Values{"policy": {"bc"}, "key": {key}}
	if r := do(t, "POST", app.URL+"/api/v1/check?"+q.Encode()+"&cost=7", ""); r.status != 400 || !namesField(r, "cost") {
		t.Fatalf("cost 7 under 6/1m: %d %s", r.status, r.raw)
	}
	r := do(t, "POST", app.URL+"/api/v1/check?"+q.Encode()+"&cost=3", "")
	if r.status != 200 || num(t, r, "count") != 3 || r.body["override"] != "key" {
		t.Fatalf("cost 3 under 6/1m: %d %s", r.status, r.raw)
	}
	id, _ := r.body["id"].(string)
	if r := settleCall(t, app, "bc", key, id, 6); r.status != 200 || num(t, r, "settled") != 6 || num(t, r, "limit") != 6 {
		t.Fatalf("settle to 6 under 6/1m: %d %s", r.status, r.raw)
	}
}
