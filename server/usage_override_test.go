package server_test

import (
	"strings"
	"testing"
	"time"
)

// TestUsageUnderAnOverride: a month quota and an override that gives one
// tenant its own month and a day quota (the contract's "20000/1d"
// example, a sliding day): the usage of that tenant counts under the
// override's rules and names the override in force; a tenant without one
// sees the policy's rules and "override": null.
func TestUsageUnderAnOverride(t *testing.T) {
	app := startApp(t, map[string]string{"RATESCOPE_ADMIN_TOKEN": "adm"}, "--policy", "plan=10/1s,3/month+tz=Europe/Berlin")
	putOverride(t, app, "plan", "prefix", "acme:", `{"rules":["100/1s","20000/1d","50/month"],"note":"enterprise"}`)
	deadline := time.Now().Add(5 * time.Second)
	for matchOf(t, app, "plan", "acme:eu").body["match"] != "prefix" {
		if time.Now().After(deadline) {
			t.Fatal("the override did not apply within 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 4 {
		check(t, app, "plan", "acme:eu")
	}
	u := do(t, "GET", app.URL+"/api/v1/usage?policy=plan&key=acme:eu", "")
	for _, want := range []string{
		`{"limit":100,"windowMs":1000,"count":4,"remaining":96,`,
		`{"limit":20000,"windowMs":86400000,"count":4,"remaining":19996,`,
		`{"limit":50,"period":"month","count":4,"remaining":46,`,
		`"override":{"policy":"plan","prefix":"acme:","rules":[{"limit":100,"windowMs":1000},{"limit":20000,"windowMs":86400000},{"limit":50,"period":"month"}],"note":"enterprise",`,
		`"timezone":"Europe/Berlin"`,
	} {
		if u.status != 200 || !strings.Contains(u.raw, want) {
			t.Fatalf("usage of an overridden tenant: %d %s\nwant %s", u.status, u.raw, want)
		}
	}
	check(t, app, "plan", "solo")
	u = do(t, "GET", app.URL+"/api/v1/usage?policy=plan&key=solo", "")
	if u.status != 200 || !strings.Contains(u.raw, `{"limit":3,"period":"month","count":1,"remaining":2,`) || !strings.Contains(u.raw, `"override":null`) {
		t.Fatalf("usage of a tenant without an override: %d %s", u.status, u.raw)
	}
}
