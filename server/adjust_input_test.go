package server_test

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/routers"
	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// windowEntries is what a window holds — its entries and count, not the
// clock — to compare before and after a request that must change nothing.
func windowEntries(t testing.TB, app *apptest.App, policy, key string, header ...string) map[string]any {
	t.Helper()
	r := do(t, "GET", app.URL+"/api/v1/window?policy="+policy+"&key="+key, "", header...)
	if r.status != 200 {
		t.Fatalf("window: %d %s", r.status, r.raw)
	}
	return map[string]any{"entries": r.body["entries"], "count": r.body["count"], "rules": r.body["rules"]}
}

// TestAdjustBadInput: every malformed refund or settle gets its 4xx — a
// problem document naming the bad field for a 400, algorithm for a 409 —
// and changes nothing in Redis: the windows its id and key point at read
// the same before and after, and nothing is counted.
func TestAdjustBadInput(t *testing.T) {
	app := startApp(t, map[string]string{"REDIS_URL": redistest.RealURL(t), "RATESCOPE_API_TOKEN": "api"},
		"--policy", "tokens=5/1m", "--policy", "fx=5/1m@fixed")
	api := []string{"Authorization", "Bearer api"}
	key := newKey()
	id := checkID(t, app, "demo", key, 2)
	tokID := checkID(t, app, "tokens", key, 2, api...)
	checkID(t, app, "fx", key, 1, api...)
	before := map[string]map[string]any{}
	for _, p := range []string{"demo", "tokens", "fx"} {
		before[p] = windowEntries(t, app, p, key, api...)
	}
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return "?" + v.Encode()
	}
	other := uuid.NewString()
	for _, tc := range []struct {
		route, query, body string
		header             []string
		status             int
		field              string
	}{
		{"refund", q("policy", "demo", "id", id), "", nil, 400, "key"},
		{"refund", q("key", "a b", "policy", "demo", "id", id), "", nil, 400, "key"},
		{"refund", "?key=" + key[:4] + "+" + key[4:] + "&policy=demo&id=" + id, "", nil, 400, "key"}, // + is a space
		{"refund", q("key", key, "policy", "nope", "id", id), "", nil, 400, "policy"},
		{"refund", q("key", key, "policy", "demo"), "", nil, 400, "id"},
		{"refund", q("key", key, "policy", "demo", "id", "not-an-id"), "", nil, 400, "id"},
		{"refund", q("key", key, "policy", "demo", "id", strings.ToUpper(id)), "", nil, 400, "id"},
		{"refund", q("key", key, "policy", "demo", "id", id+":1"), "", nil, 400, "id"},
		{"refund", q("key", key, "policy", "demo", "id", id, "id", id), "", nil, 400, "id"},
		{"refund", q("key", key, "policy", "demo", "id", id), `{"id":"` + other + `"}`, nil, 400, "id"},
		{"refund", "", `{"key":"` + key + `","policy":"demo","id":7}`, nil, 400, "id"},
		{"refund", "", `["` + id + `"]`, nil, 400, "body"},
		{"refund", "", `{"key":"` + key + `","policy":"demo","id":"` + id + `"} {}`, nil, 400, "body"},
		{"settle", q("key", key, "policy", "demo", "id", id), "", nil, 400, "cost"},
		{"settle", q("key", key, "policy", "demo", "id", id, "cost", "-1"), "", nil, 400, "cost"},
		{"settle", q("key", key, "policy", "demo", "id", id, "cost", "6"), "", nil, 400, "cost"},
		{"settle", q("key", key, "policy", "demo", "id", id, "cost", "x"), "", nil, 400, "cost"},
		{"settle", q("key", key, "policy", "demo", "id", id, "cost", "1", "cost", "1"), "", nil, 400, "cost"},
		{"settle", "", `{"key":"` + key + `","policy":"demo","id":"` + id + `","cost":"1"}`, nil, 400, "cost"},
		{"settle", "", `{"key":"` + key + `","policy":"demo","id":"` + id + `","cost":1.5}`, nil, 400, "cost"},
		{"settle", q("cost", "1"), `{"key":"` + key + `","policy":"demo","id":"` + id + `","cost":3}`, nil, 400, "cost"},
		{"settle", q("key", key, "policy", "tokens", "id", tokID, "cost", "9"), "", api, 400, "cost"},
		// Another algorithm keeps no entries per check.
		{"refund", q("key", key, "policy", "fx", "id", other), "", api, 409, "algorithm"},
		{"settle", q("key", key, "policy", "fx", "id", other, "cost", "0"), "", api, 409, "algorithm"},
		// What a check needs: the API token on a non-demo policy.
		{"refund", q("key", key, "policy", "tokens", "id", tokID), "", nil, 401, ""},
		{"settle", q("key", key, "policy", "tokens", "id", tokID, "cost", "0"), "", []string{"Authorization", "Bearer nope"}, 401, ""},
		{"refund", "", `{"key":"` + strings.Repeat("k", 70<<10) + `"}`, nil, 413, ""},
	} {
		r := do(t, "POST", app.URL+"/api/v1/"+tc.route+tc.query, tc.body, tc.header...)
		what := tc.route + tc.query + " " + truncated(tc.body)
		if r.status != tc.status || r.header.Get("Content-Type") != "application/problem+json" || num(t, r, "status") != int64(tc.status) {
			t.Errorf("%s: %d %s, want %d", what, r.status, truncated(r.raw), tc.status)
			continue
		}
		if tc.field != "" && !namesField(r, tc.field) {
			t.Errorf("%s: errors %v, want one naming %s", what, r.body["errors"], tc.field)
		}
		if tc.status == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without WWW-Authenticate: Bearer", what)
		}
	}
	if r := do(t, "GET", app.URL+"/api/v1/refund"+q("key", key, "policy", "demo", "id", id), ""); r.status != 405 {
		t.Errorf("GET /api/v1/refund: %d", r.status)
	}
	for p, was := range before {
		if now := windowEntries(t, app, p, key, api...); !reflect.DeepEqual(now, was) {
			t.Errorf("window %s changed:\nbefore %v\nafter  %v", p, was, now)
		}
	}
	if m := metrics(t, app); strings.Contains(grepLines(m, "ratescope_adjustments_total{"), "} 1") {
		t.Errorf("refused calls were counted:\n%s", grepLines(m, "adjustments_total"))
	}
	// The same calls, well formed, do change the windows.
	wantAdjusted(t, "refund with the token", refundCall(t, app, "tokens", key, tokID, api...), map[string]int64{"refunded": 2, "count": 0})
	wantAdjusted(t, "settle on demo", settleCall(t, app, "demo", key, id, 5), map[string]int64{"was": 2, "settled": 5, "count": 5})
}

// namesField reports whether a problem's errors name field, with a detail;
// only a body that is no JSON object leaves other fields missing too.
func namesField(r response, field string) bool {
	errs, _ := r.body["errors"].([]any)
	if len(errs) != 1 && field != "body" {
		return false
	}
	for _, e := range errs {
		if e := e.(map[string]any); e["field"] == field && e["detail"] != "" {
			return true
		}
	}
	return false
}

func truncated(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// TestAdjustWhileRedisFails: with Redis not answering, a refund or settle
// answers 503 with Retry-After: 1 within the check timeout — in either fail
// mode, as nothing can be adjusted without Redis — counted by operation.
// (A call that timed out may still run once Redis answers again: both are
// idempotent, so a client retries it.)
func TestAdjustWhileRedisFails(t *testing.T) {
	proxy := redistest.StartProxy(t, redistest.RealURL(t))
	for _, mode := range []string{"closed", "open"} {
		app := startApp(t, map[string]string{"REDIS_URL": proxy.URL, "RATESCOPE_CHECK_TIMEOUT": "300ms", "RATESCOPE_FAIL_MODE": mode})
		key := newKey()
		id := checkID(t, app, "demo", key, 1)
		proxy.Pause()
		for _, call := range []func() response{
			func() response { return refundCall(t, app, "demo", key, id) },
			func() response { return settleCall(t, app, "demo", key, id, 2) },
		} {
			start := time.Now()
			r := call()
			if r.status != 503 || r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("fail mode %s: %d %v %s, want 503", mode, r.status, r.header, r.raw)
			}
			if took := time.Since(start); took > 300*time.Millisecond+2*time.Second {
				t.Errorf("fail mode %s: answered after %v", mode, took)
			}
		}
		proxy.Resume()
		m := metrics(t, app)
		for _, want := range []string{`ratescope_redis_errors_total{op="refund"} 1`, `ratescope_redis_errors_total{op="settle"} 1`, `ratescope_adjustments_total{kind="refund",policy="demo"} 0`} {
			if !strings.Contains(m, want+"\n") {
				t.Errorf("fail mode %s: /metrics lacks %s:\n%s", mode, want, grepLines(m, "op="))
			}
		}
	}
}

// TestAdjustmentSeriesFromTheStart: ratescope_adjustments_total has a
// series at zero for each kind and each policy in force — the built-in
// ones, those of the flags and of the file — and a policy a reload adds
// gets its own at once.
func TestAdjustmentSeriesFromTheStart(t *testing.T) {
	path := writeConfig(t, "policies:\n  - {name: filed, rules: [\"3/1m\"]}\n")
	app := startApp(t, nil, "--config", path, "--policy", "flagged=2/1s")
	want := func(policies ...string) {
		t.Helper()
		m := metrics(t, app)
		for _, p := range policies {
			for _, kind := range []string{"refund", "settle"} {
				if line := `ratescope_adjustments_total{kind="` + kind + `",policy="` + p + `"} 0`; !strings.Contains(m, line+"\n") {
					t.Errorf("/metrics lacks %s:\n%s", line, grepLines(m, "adjustments_total"))
				}
			}
		}
	}
	want("default", "demo", "filed", "flagged")
	v := version(t, app)
	replaceFile(t, path, "policies:\n  - {name: filed, rules: [\"3/1m\"]}\n  - {name: added, rules: [\"4/1m\"]}\n")
	waitFor(t, 10*time.Second, "the reload", func() bool { return version(t, app) != v })
	want("added")
}

// describeAdjustments sends refund and settle the answers they can give —
// of a demo check and, with the token, of a non-demo one; bad,
// unauthorized, of another algorithm (openAPIConfig's f and g), too large —
// for TestOpenAPIDescribesEveryAnswer.
func describeAdjustments(t *testing.T, router routers.Router, app *apptest.App, api []string, big string) {
	t.Helper()
	u := app.URL
	id := checkID(t, app, "demo", "oa-adj", 2)
	loginID := checkID(t, app, "login", "oa-adj", 1, api...)
	must(t, router, 200, call(t, "POST", u+"/api/v1/settle?key=oa-adj&policy=demo&id="+id+"&cost=3", ""))
	must(t, router, 200, call(t, "POST", u+"/api/v1/settle", `{"key":"oa-adj","policy":"demo","id":"`+id+`","cost":0}`))
	must(t, router, 200, call(t, "POST", u+"/api/v1/refund?key=oa-adj&policy=demo&id="+id, ""))
	must(t, router, 200, call(t, "POST", u+"/api/v1/refund", `{"key":"oa-adj","policy":"login","id":"`+loginID+`"}`, api...))
	must(t, router, 400, call(t, "POST", u+"/api/v1/refund?key=oa-adj&policy=demo&id=nope", ""))
	must(t, router, 400, call(t, "POST", u+"/api/v1/settle?key=oa-adj&policy=demo&id="+id, ""))
	must(t, router, 401, call(t, "POST", u+"/api/v1/refund?key=oa-adj&policy=login&id="+loginID, ""))
	must(t, router, 401, call(t, "POST", u+"/api/v1/settle?key=oa-adj&policy=login&id="+loginID+"&cost=1", ""))
	must(t, router, 409, call(t, "POST", u+"/api/v1/refund?key=oa-adj&policy=f&id="+id, "", api...))
	must(t, router, 409, call(t, "POST", u+"/api/v1/settle?key=oa-adj&policy=g&id="+id+"&cost=1", "", api...))
	must(t, router, 413, call(t, "POST", u+"/api/v1/refund", big))
	must(t, router, 413, call(t, "POST", u+"/api/v1/settle", big))
}
