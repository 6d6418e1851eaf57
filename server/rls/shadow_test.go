package rls_test

import (
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestShadowPolicyAnswersOK: a shadow policy (watch=2/60s+shadow) past its
// limit is decided as a would-deny, but Envoy hears OK: no OVER_LIMIT, no
// retry and no Retry-After; beside a descriptor that is denied, only that
// one is OVER_LIMIT.
func TestShadowPolicyAnswersOK(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	watch := "watch=" + newValue()
	for range 2 {
		h.call(t, request(0, watch))
	}
	resp := h.call(t, request(0, watch))
	st := resp.GetStatuses()[0]
	if resp.GetOverallCode() != ok || st.GetCode() != ok || st.GetLimitRemaining() != 0 || st.GetDurationUntilReset().AsDuration() != 0 {
		t.Fatalf("would-deny answered %v %v, want OK, 0 remaining, no retry", resp.GetOverallCode(), st)
	}
	wantLimit(t, st, "watch", 2, rlsv3.RateLimitResponse_RateLimit_MINUTE)
	hs := headers(t, resp)
	if _, ok := hs["Retry-After"]; ok || !strings.HasPrefix(hs["RateLimit"], `"watch";r=0;`) {
		t.Errorf("headers %v, want RateLimit and no Retry-After", hs)
	}
	seen := h.seen()
	if d := seen[len(seen)-1]; !d.WouldDeny() || d.RetryAfterMs <= 0 {
		t.Errorf("the decision %+v is not a would-deny with its retry", d)
	}
	if n := h.windowCount(t, strings.TrimPrefix(watch, "watch="), "watch"); n != 2 {
		t.Errorf("the window holds %d entries, want 2: a would-deny records nothing", n)
	}

	ip := "remote_address=" + newValue()
	for range 3 {
		h.call(t, request(0, ip))
	}
	resp = h.call(t, request(0, watch, ip))
	if c := resp.GetStatuses(); resp.GetOverallCode() != overLimit || c[0].GetCode() != ok || c[1].GetCode() != overLimit {
		t.Fatalf("overall %v statuses %v, want OVER_LIMIT with OK then OVER_LIMIT", resp.GetOverallCode(), c)
	}
	want := (resp.GetStatuses()[1].GetDurationUntilReset().AsDuration().Milliseconds() + 999) / 1000
	if got := headers(t, resp)["Retry-After"]; got == "" || got != strconv.FormatInt(want, 10) {
		t.Errorf("Retry-After %q, want the denied descriptor's %d", got, want)
	}
}
