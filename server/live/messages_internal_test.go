package live

import (
	"encoding/json"
	"strings"
	"testing"

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
	if h := string(helloMessage("i", "acme", p, 100)); !strings.Contains(h, `"rules":[{"limit":10,"windowMs":1000},{"limit":3,"period":"month"}]`) {
		t.Errorf("hello %s", h)
	}
}
