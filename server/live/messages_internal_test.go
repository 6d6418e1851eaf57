package live

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/limiter"
)

// TestQuotaRuleMessages: a calendar quota travels as its period, not a
// window — a viewer that draws windows (windowMs > 0) leaves it alone —
// with the length of the period holding now and the time to its end; the
// hello message names its period too.
func TestQuotaRuleMessages(t *testing.T) {
	w := limiter.Window{Key: "acme", Policy: "plan", Algorithm: limiter.Log, NowMs: 1000, WindowMs: 1000, Rules: []limiter.RuleState{
		{Limit: 10, WindowMs: 1000, Count: 2, Remaining: 8, OldestMs: 500, ResetMs: 500},
		{Limit: 3, Period: limiter.Month, PeriodMs: 743 * 3_600_000, Count: 1, Remaining: 2, OldestMs: -1, ResetMs: 86_400_000},
	}}
	b, err := json.Marshal(NewWindowState(w))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`{"limit":10,"windowMs":1000,"count":2,"remaining":8}`,
		`{"limit":3,"period":"month","count":1,"remaining":2,"periodMs":2674800000,"resetMs":86400000}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("window %s lacks %s", b, want)
		}
	}
	p, err := limiter.ParsePolicy("plan=10/1s,3/month+tz=Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if h := string(helloMessage("i", "acme", p, nil, 100)); !strings.Contains(h, `"rules":[{"limit":10,"windowMs":1000},{"limit":3,"period":"month"}]`) ||
		!strings.Contains(h, `"timezone":"Europe/Berlin","override":null}`) {
		t.Errorf("hello %s", h)
	}
}

// TestOverrideMessages: under an override, hello carries the rules in
// force (the override's) and the override itself — label, rules, note —
// as does the override message of a change; a snapshot names the override
// it was counted under, and says nothing of one under the policy's rules.
func TestOverrideMessages(t *testing.T) {
	p, err := limiter.ParsePolicy("plan=10/1s,3/month")
	if err != nil {
		t.Fatal(err)
	}
	o := &Override{Label: "prefix:acme:", Rules: []limiter.Rule{{Limit: 1000, Window: time.Minute}, {Limit: 50, Period: limiter.Month}}, Note: "enterprise plan", UpdatedMs: 7}
	in := p
	in.Rules = o.Rules
	const rules = `"rules":[{"limit":1000,"windowMs":60000},{"limit":50,"period":"month"}]`
	const override = `"override":{"label":"prefix:acme:",` + rules + `,"note":"enterprise plan","updatedMs":7}`
	if h := string(helloMessage("i", "acme:eu", in, o, 100)); !strings.Contains(h, `"policy":"plan",`+rules+`,"tickMs":100`) ||
		!strings.Contains(h, `"timezone":"UTC",`+override+`}`) {
		t.Errorf("hello under an override: %s", h)
	}
	w := Window{Key: "acme:eu", Policy: "plan"}
	if m := string(overrideMessage(w, in, o)); m != `{"type":"override","key":"acme:eu","policy":"plan",`+rules+`,`+override+`}` {
		t.Errorf("override message: %s", m)
	}
	if m := string(overrideMessage(w, p, nil)); m != `{"type":"override","key":"acme:eu","policy":"plan","rules":[{"limit":10,"windowMs":1000},{"limit":3,"period":"month"}],"override":null}` {
		t.Errorf("override message once it is gone: %s", m)
	}
	win := limiter.Window{Key: "acme:eu", Policy: "plan", Algorithm: limiter.Log, Rules: []limiter.RuleState{{Limit: 1000, WindowMs: 60000}}}
	if s := string(snapshotMessage(win, "prefix:acme:")); !strings.HasSuffix(s, `,"override":"prefix:acme:"}`) {
		t.Errorf("snapshot under an override: %s", s)
	}
	if s := string(snapshotMessage(win, "")); strings.Contains(s, "override") {
		t.Errorf("snapshot under the policy's rules: %s", s)
	}
}
