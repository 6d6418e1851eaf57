package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed

	"github.com/ratescope/ratescope/limiter"
)

const quotaConfig = `
policies:
  - name: plan
    rules: ["10/1s", "3/month"]
    timezone: America/New_York
`

// TestQuotaAPI: a policy with a calendar quota, from the config file's
// timezone: field and from --policy's +tz=: the policies list names its
// period and zone; a check answers with the quota's rule; the usage
// endpoint reads every rule — a window's windowMs, a quota's period — with
// its count, remaining and reset (to the end of the month in New York, on
// Redis's clock), without consuming, and the override in force (none);
// and bad input gets 400 naming the field. The page shows the quota's rule.
func TestQuotaAPI(t *testing.T) {
	app := startApp(t, nil, "--config", writeConfig(t, quotaConfig), "--policy", "daily=2/day+tz=Asia/Tokyo@gcra")
	r := do(t, "GET", app.URL+"/api/v1/policies", "")
	for _, want := range []string{
		`{"name":"plan","rules":[{"limit":10,"windowMs":1000},{"limit":3,"period":"month"}],"algorithm":"log","shadow":false,"timezone":"America/New_York"}`,
		`{"name":"daily","rules":[{"limit":2,"period":"day"}],"algorithm":"gcra","shadow":false,"timezone":"Asia/Tokyo"}`,
	} {
		if !strings.Contains(r.raw, want) {
			t.Fatalf("policies %s lack %s", r.raw, want)
		}
	}
	ny, _ := time.LoadLocation("America/New_York")
	key := "acme"
	for i := 1; i <= 4; i++ {
		c := do(t, "POST", app.URL+"/api/v1/check?policy=plan&key="+key, "")
		_, end := limiter.Month.Bounds(time.UnixMilli(num(t, c, "nowMs")), ny)
		left := end.UnixMilli() - num(t, c, "nowMs")
		if i <= 3 {
			if c.status != 200 || !strings.Contains(c.raw, fmt.Sprintf(`{"limit":3,"period":"month","count":%d,"remaining":%d}`, i, 3-i)) ||
				!strings.Contains(c.header.Get("RateLimit"), fmt.Sprintf(`"plan/month";r=%d;t=%d`, 3-i, (left+999)/1000)) {
				t.Fatalf("check %d: %d %v %s", i, c.status, c.header, c.raw)
			}
			continue
		}
		if c.status != 429 || num(t, c, "retryAfterMs") != left || c.body["period"] != "month" || c.header.Get("Retry-After") != fmt.Sprint((left+999)/1000) {
			t.Fatalf("the 4th check of the month: %d %v %s, want 429 retrying in %d ms, at midnight of the 1st in New York", c.status, c.header, c.raw, left)
		}
	}
	u := do(t, "GET", app.URL+"/api/v1/usage?policy=plan&key="+key, "")
	if u.status != 200 {
		t.Fatalf("usage: %d %s", u.status, u.raw)
	}
	now := num(t, u, "nowMs")
	_, end := limiter.Month.Bounds(time.UnixMilli(now), ny)
	rules := u.body["rules"].([]any)
	window, month := rules[0].(map[string]any), rules[1].(map[string]any)
	if u.body["key"] != key || u.body["policy"] != "plan" || u.body["timezone"] != "America/New_York" || u.body["override"] != nil ||
		window["windowMs"] != 1000.0 || window["period"] != nil || window["limit"] != 10.0 ||
		month["period"] != "month" || month["windowMs"] != nil || month["count"] != 3.0 || month["remaining"] != 0.0 ||
		int64(month["resetMs"].(float64)) != end.UnixMilli()-now {
		t.Fatalf("usage %s, want the month at 3 of 3, resetting in %d ms", u.raw, end.UnixMilli()-now)
	}
	if _, ok := u.body["override"]; !ok {
		t.Fatalf("usage %s lacks the override member", u.raw)
	}
	// Reading consumed nothing: a second read counts the same.
	if again := do(t, "GET", app.URL+"/api/v1/usage?policy=plan&key="+key, ""); !strings.Contains(again.raw, `"period":"month","count":3,"remaining":0`) {
		t.Fatalf("usage read again: %s", again.raw)
	}
	d := do(t, "GET", app.URL+"/api/v1/usage?policy=daily&key="+key, "")
	if d.status != 200 || !strings.Contains(d.raw, `"timezone":"Asia/Tokyo"`) || !strings.Contains(d.raw, `{"limit":2,"period":"day","count":0,"remaining":2,"resetMs":`) {
		t.Fatalf("usage of a fresh key: %d %s", d.status, d.raw)
	}
	for q, field := range map[string]string{"policy=plan": "key", "policy=nope&key=a": "policy", "policy=plan&key=a%20b": "key"} {
		b := do(t, "GET", app.URL+"/api/v1/usage?"+q, "")
		if b.status != 400 || !strings.Contains(b.raw, `"field":"`+field+`"`) {
			t.Errorf("usage?%s: %d %s, want 400 naming %s", q, b.status, b.raw, field)
		}
	}
	if p, page := doRaw(t, "GET", app.URL+"/?policy=plan&key="+key); p.status != 200 || !strings.Contains(page, "10 per 1s, 3 per month") {
		t.Fatalf("the page of a policy with a quota: %d", p.status)
	}
}
