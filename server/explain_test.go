package server_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

const explainConfig = `
policies:
  - {name: two, rules: ["2/10s", "3/1m"]}
  - {name: plan, rules: ["5/10s", "1/day"]}
  - {name: f, rules: ["2/10s"], algorithm: fixed}
`

// explainOf reads an answer's explain member.
func explainOf(t *testing.T, raw []byte) httplimit.Explanation {
	t.Helper()
	var b struct {
		Explain *httplimit.Explanation `json:"explain"`
	}
	if err := json.Unmarshal(raw, &b); err != nil || b.Explain == nil {
		t.Fatalf("no explain in %s (%v)", raw, err)
	}
	return *b.Explain
}

// TestCheckExplain: explain=1 adds the decision's explanation to a check's
// answer, 200 and 429, under a two-rule policy — each rule's window, count
// and, for the 429, the k-th oldest entry and the retry's sum, which agree
// with the answer's own nowMs, oldestMs and retryAfterMs; without it the
// answer has none. Both validate against the OpenAPI document.
func TestCheckExplain(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, explainConfig))
	_, router := apiDoc(t, app)
	key := newKey()
	u := app.URL + "/api/v1/check?policy=two&key=" + key
	plain := call(t, "POST", u, "")
	must(t, router, 200, plain)
	if strings.Contains(string(plain.respBody), `"explain"`) {
		t.Fatalf("an answer not asked to explain: %s", plain.respBody)
	}
	ok := call(t, "POST", u+"&explain=1", "")
	must(t, router, 200, ok)
	a := explainOf(t, ok.respBody)
	if a.Outcome != "allowed" || len(a.Rules) != 2 || a.Rules[0].Count != 1 || !a.Rules[0].Fits || a.Rules[0].Name != "two/10" || len(a.Steps) == 0 {
		t.Fatalf("the allowed check's explanation: %+v", a)
	}
	denied := call(t, "POST", app.URL+"/api/v1/check", `{"key":"`+key+`","policy":"two","explain":1}`)
	must(t, router, 429, denied)
	var body struct {
		NowMs, OldestMs, RetryAfterMs int64
	}
	if err := json.Unmarshal(denied.respBody, &body); err != nil {
		t.Fatal(err)
	}
	e := explainOf(t, denied.respBody)
	r := e.Rules[0]
	if e.Outcome != "denied" || e.NowMs != body.NowMs || e.RetryAfterMs != body.RetryAfterMs || r.Fits || r.Count != 2 || r.K != 1 {
		t.Fatalf("the 429's explanation %+v of %s", e, denied.respBody)
	}
	if r.KthMs == nil || *r.KthMs != body.OldestMs || r.FromMs != body.NowMs-10000 || !e.Rules[1].Fits {
		t.Fatalf("the entry that slides out: %+v, the answer's oldest %d", r, body.OldestMs)
	}
	want := fmt.Sprintf("= %d + 10000 − %d = %d", body.OldestMs, body.NowMs, body.RetryAfterMs)
	if !strings.Contains(r.Arithmetic, want) {
		t.Fatalf("arithmetic %q, want %q", r.Arithmetic, want)
	}
	bad := call(t, "POST", u+"&explain=yes", "")
	must(t, router, 400, bad)
	if !strings.Contains(string(bad.respBody), `"field":"explain"`) {
		t.Fatalf("explain=yes: %s", bad.respBody)
	}
}

// TestGetExplain: GET /api/v1/explain rebuilds an allowed check's
// explanation from the log — the numbers the check's own explain=1 gave —
// names what it cannot know (a quota's history, the start of a window
// the log may have evicted since: complete false), answers
// 404 naming id for an id with no entry left, 400 for a malformed id, 409
// for a policy that keeps no entries, 401 where reading the window needs a
// token; every answer validates against the OpenAPI document.
func TestGetExplain(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_API_TOKEN": "api"}, "--config", writeConfig(t, explainConfig))
	_, router := apiDoc(t, app)
	tok := []string{"Authorization", "Bearer api"}
	key := newKey()
	var last []byte
	for range 2 {
		x := call(t, "POST", app.URL+"/api/v1/check?policy=two&explain=1&key="+key, "", tok...)
		must(t, router, 200, x)
		last = x.respBody
	}
	var checked struct{ ID string }
	_ = json.Unmarshal(last, &checked)
	decided := explainOf(t, last)
	q := app.URL + "/api/v1/explain?policy=two&key=" + key + "&id="
	x := call(t, "GET", q+checked.ID, "", tok...)
	must(t, router, 200, x)
	got := explainOf(t, x.respBody)
	for i, w := range decided.Rules {
		g := got.Rules[i]
		if g.Name != w.Name || g.Count != w.Count || g.FromMs != w.FromMs || g.ToMs != w.ToMs || *g.OldestMs != *w.OldestMs {
			t.Fatalf("rule %d rebuilt %+v, decided %+v", i, g, w)
		}
	}
	if got.NowMs != decided.NowMs || got.Recalled == nil || got.Recalled.ID != checked.ID || got.Complete != (len(got.Gaps) == 0) {
		t.Fatalf("rebuilt %+v", got)
	}
	// The 10 s window lies inside what the log keeps (the last minute):
	// certain; the minute's start may have lost entries since, and says so.
	for _, g := range got.Gaps {
		if !strings.Contains(g, "60000 ms window") {
			t.Fatalf("gap %q", g)
		}
	}

	// A quota keeps no history: said so.
	pc := call(t, "POST", app.URL+"/api/v1/check?policy=plan&key="+key, "", tok...)
	_ = json.Unmarshal(pc.respBody, &checked)
	x = call(t, "GET", app.URL+"/api/v1/explain?policy=plan&key="+key+"&id="+checked.ID, "", tok...)
	must(t, router, 200, x)
	// (Its window may name a gap too: read a millisecond after the check,
	// the window's first millisecond lies before what the log must keep.)
	if e := explainOf(t, x.respBody); e.Complete || !slices.ContainsFunc(e.Gaps, func(g string) bool { return strings.Contains(g, "day") }) {
		t.Fatalf("a quota's check rebuilt: %+v", e)
	}

	// Gone, malformed, another algorithm, no token.
	refund := call(t, "POST", app.URL+"/api/v1/refund?policy=plan&key="+key+"&id="+checked.ID, "", tok...)
	if refund.status != 200 {
		t.Fatalf("refund: %d %s", refund.status, refund.respBody)
	}
	gone := call(t, "GET", app.URL+"/api/v1/explain?policy=plan&key="+key+"&id="+checked.ID, "", tok...)
	must(t, router, 404, gone)
	if !strings.Contains(string(gone.respBody), `"field":"id"`) {
		t.Fatalf("404 does not name id: %s", gone.respBody)
	}
	bad := call(t, "GET", q+"not-an-id", "", tok...)
	must(t, router, 400, bad)
	if !strings.Contains(string(bad.respBody), `"field":"id"`) {
		t.Fatalf("400 does not name id: %s", bad.respBody)
	}
	must(t, router, 409, call(t, "GET", app.URL+"/api/v1/explain?policy=f&key="+key+"&id="+checked.ID, "", tok...))
	must(t, router, 401, call(t, "GET", q+checked.ID, ""))
}

// TestCheckExplainFailOpen: with Redis not answering and the fail mode
// open, explain=1 says nothing was decided.
func TestCheckExplainFailOpen(t *testing.T) {
	proxy := redistest.StartProxy(t, redistest.RealURL(t))
	app := startApp(t, map[string]string{"REDIS_URL": proxy.URL, "RATESCOPE_CHECK_TIMEOUT": "300ms", "RATESCOPE_FAIL_MODE": "open"})
	_, router := apiDoc(t, app)
	proxy.Pause()
	x := call(t, "POST", app.URL+"/api/v1/check?policy=demo&explain=1&key="+newKey(), "")
	proxy.Resume()
	must(t, router, 200, x)
	if e := explainOf(t, x.respBody); e.Outcome != "failOpen" || !strings.Contains(e.Text, "fail mode is open") {
		t.Fatalf("%+v", e)
	}
}
