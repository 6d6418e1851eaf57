package server_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// overrideSeen bounds how long an override set on one instance may take to
// reach another's viewers: the contract says a second; a loaded machine
// gets a margin.
const overrideSeen = 5 * time.Second

// jsonOf is v as JSON, to compare a message's members whole.
func jsonOf(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLiveViewUnderAnOverride: two instances on one Redis. A viewer on B
// watches a key while an override of it is set, changed to a prefix's and
// deleted on A: each change reaches it in an override message (the rules
// in force and the override's label, rules and note), and the snapshots
// that follow count under those rules and name the override. A viewer that
// joins meanwhile gets the override in its hello; GET /api/v1/window on B
// answers under it too.
func TestLiveViewUnderAnOverride(t *testing.T) {
	env := map[string]string{"REDIS_URL": redistest.URL(t), "RATESCOPE_ADMIN_TOKEN": "adm"}
	a := startApp(t, env, "--policy", "ov=2/1m")
	b := startApp(t, env, "--policy", "ov=2/1m")
	tag := newKey() + ":"
	key := tag + "eu"
	v := watch(t, b, url.Values{"policy": {"ov"}, "key": {key}}.Encode(), nil)
	hello := v.next("hello", nil)
	if got := jsonOf(t, hello["rules"]); got != `[{"limit":2,"windowMs":60000}]` || hello["override"] != nil || hello["timezone"] != "UTC" {
		t.Fatalf("hello without an override: %v", hello)
	}
	v.next("snapshot", func(m map[string]any) bool { return m["limit"] == 2.0 && m["override"] == nil })

	const rules = `[{"limit":5,"windowMs":60000},{"limit":50,"period":"day"}]`
	set := time.Now()
	putOverride(t, a, "ov", "key", key, `{"rules":["5/1m","50/day"],"note":"gold"}`)
	m := v.next("override", nil)
	took := time.Since(set)
	if m["key"] != key || m["policy"] != "ov" || jsonOf(t, m["rules"]) != rules {
		t.Fatalf("override message: %v", m)
	}
	o, _ := m["override"].(map[string]any)
	if o == nil || o["label"] != "key" || o["note"] != "gold" || jsonOf(t, o["rules"]) != rules || o["updatedMs"].(float64) <= 0 {
		t.Fatalf("the override in its message: %v", m)
	}
	if took > overrideSeen {
		t.Fatalf("the override reached the other instance's viewer after %v", took)
	}
	t.Logf("the override reached the other instance's viewer in %v", took)
	for range 3 {
		check(t, a, "ov", key)
	}
	snap := v.next("snapshot", func(m map[string]any) bool { return m["count"] == 3.0 })
	if day := quotaRule(snap, "day"); snap["limit"] != 5.0 || snap["override"] != "key" ||
		day == nil || day["limit"] != 50.0 || day["count"] != 3.0 || day["remaining"] != 47.0 {
		t.Fatalf("snapshot under the override: %v", snap)
	}

	late := watch(t, b, url.Values{"policy": {"ov"}, "key": {key}}.Encode(), nil)
	hello = late.next("hello", nil)
	if jsonOf(t, hello["rules"]) != rules || hello["override"] == nil || hello["override"].(map[string]any)["note"] != "gold" {
		t.Fatalf("hello of a viewer that joins under the override: %v", hello)
	}
	w := do(t, "GET", b.URL+"/api/v1/window?"+url.Values{"policy": {"ov"}, "key": {key}}.Encode(), "")
	if w.status != 200 || num(t, w, "count") != 3 || num(t, w, "limit") != 5 || w.body["override"] != "key" {
		t.Fatalf("GET /api/v1/window under the override: %d %s", w.status, w.raw)
	}

	// A prefix's override counts for the key once its own is gone.
	putOverride(t, a, "ov", "prefix", tag, `{"rules":["4/1m"],"note":"eu plan"}`)
	if r := do(t, "DELETE", overrideURL(a, "ov", "key", key), "", admin...); r.status != 204 {
		t.Fatalf("DELETE the key's override: %d %s", r.status, r.raw)
	}
	m = v.next("override", func(m map[string]any) bool {
		o, _ := m["override"].(map[string]any)
		return o != nil && o["label"] == "prefix:"+tag
	})
	if jsonOf(t, m["rules"]) != `[{"limit":4,"windowMs":60000}]` || m["override"].(map[string]any)["note"] != "eu plan" {
		t.Fatalf("override message of the prefix's: %v", m)
	}
	v.next("snapshot", func(m map[string]any) bool { return m["limit"] == 4.0 && m["override"] == "prefix:"+tag })

	// Deleted: the policy's rules again.
	if r := do(t, "DELETE", overrideURL(a, "ov", "prefix", tag), "", admin...); r.status != 204 {
		t.Fatalf("DELETE the prefix's override: %d %s", r.status, r.raw)
	}
	m = v.next("override", func(m map[string]any) bool { return m["override"] == nil })
	if jsonOf(t, m["rules"]) != `[{"limit":2,"windowMs":60000}]` {
		t.Fatalf("override message once none applies: %v", m)
	}
	v.next("snapshot", func(m map[string]any) bool { return m["limit"] == 2.0 && m["override"] == nil })
	w = do(t, "GET", b.URL+"/api/v1/window?"+url.Values{"policy": {"ov"}, "key": {key}}.Encode(), "")
	if w.status != 200 || num(t, w, "limit") != 2 || w.body["override"] != nil {
		t.Fatalf("GET /api/v1/window once none applies: %d %s", w.status, w.raw)
	}
}

// TestResetUnderAnOverride: resetting a window empties the counters of
// the calendar quotas of the override in force too, which are named for
// its rules, not the policy's.
func TestResetUnderAnOverride(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "rs=10/1m")
	key := newKey()
	putOverride(t, app, "rs", "key", key, `{"rules":["10/1m","50/day"]}`)
	waitOverride(t, app, "rs", key, "key")
	for range 3 {
		check(t, app, "rs", key)
	}
	usage := func() string {
		return do(t, "GET", app.URL+"/api/v1/usage?policy=rs&key="+key, "").raw
	}
	if u := usage(); !strings.Contains(u, `{"limit":50,"period":"day","count":3,`) {
		t.Fatalf("usage before the reset: %s", u)
	}
	if r := do(t, "DELETE", app.URL+"/api/v1/window?policy=rs&key="+key, "", admin...); r.status != 204 {
		t.Fatalf("reset: %d %s", r.status, r.raw)
	}
	if u := usage(); !strings.Contains(u, `{"limit":10,"windowMs":60000,"count":0,`) || !strings.Contains(u, `{"limit":50,"period":"day","count":0,`) {
		t.Fatalf("usage after the reset: %s", u)
	}
}

// TestOverviewMarksOverriddenKeys: the overview's top lists name the
// override in force for each client — a key's own, a prefix's — and
// nothing for a client under its policy's rules.
func TestOverviewMarksOverriddenKeys(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "ovw=100/1m")
	tag := newKey() + ":"
	own, byPrefix, plain := newKey(), tag+"x", newKey()
	putOverride(t, app, "ovw", "key", own, `{"rules":["200/1m"]}`)
	putOverride(t, app, "ovw", "prefix", tag, `{"rules":["300/1m"]}`)
	waitOverride(t, app, "ovw", own, "key")
	waitOverride(t, app, "ovw", byPrefix, "prefix")
	for _, k := range []string{own, byPrefix, plain} {
		check(t, app, "ovw", k)
	}
	want := map[string]any{own: "key", byPrefix: "prefix:" + tag, plain: nil}
	r := do(t, "GET", app.URL+"/api/v1/overview?policy=ovw", "", admin...)
	rows, _ := r.body["top"].(map[string]any)["checks"].([]any)
	seen := 0
	for _, row := range rows {
		row := row.(map[string]any)
		k, _ := row["key"].(string)
		if w, ok := want[k]; ok {
			seen++
			if row["override"] != w {
				t.Errorf("row of %s: %v, want override %v", k, row, w)
			}
		}
	}
	if r.status != 200 || seen != len(want) {
		t.Fatalf("overview: %d %s", r.status, r.raw)
	}
}

// quotaRule is the rule of a window message whose period is period, or nil.
func quotaRule(m map[string]any, period string) map[string]any {
	rules, _ := m["rules"].([]any)
	for _, r := range rules {
		if r, _ := r.(map[string]any); r != nil && r["period"] == period {
			return r
		}
	}
	return nil
}

// waitOverride waits until app applies an override (match "key" or
// "prefix") to key.
func waitOverride(t testing.TB, app *apptest.App, policy, key, match string) {
	t.Helper()
	waitFor(t, overrideSeen, "the override applying to "+key, func() bool { return matchOf(t, app, policy, key).body["match"] == match })
}
