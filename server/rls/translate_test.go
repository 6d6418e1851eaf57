package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// TestCurrentLimit expresses rules in the largest unit dividing the window,
// the limit scaled to it and rounded up (SPEC §7's examples first).
func TestCurrentLimit(t *testing.T) {
	const (
		second = rlsv3.RateLimitResponse_RateLimit_SECOND
		minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
		day    = rlsv3.RateLimitResponse_RateLimit_DAY
	)
	for _, tc := range []struct {
		limit   int
		window  time.Duration
		perUnit uint32
		unit    rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{37, 30 * time.Second, 2, second},
		{5, time.Minute, 5, minute},
		{10, time.Second, 10, second},
		{10, 90 * time.Second, 1, second},
		{5, 2 * time.Minute, 3, minute},
		{20, time.Hour, 20, hour},
		{7, 90 * time.Minute, 1, minute},
		{100, 48 * time.Hour, 50, day},
		{1000, 7 * 24 * time.Hour, 143, day},
		{100_000, 36 * time.Hour, 2778, hour},
	} {
		r := limiter.RuleState{Limit: tc.limit, WindowMs: tc.window.Milliseconds()}
		got := currentLimit("p", 1, r)
		if got.GetRequestsPerUnit() != tc.perUnit || got.GetUnit() != tc.unit || got.GetName() != "p" {
			t.Errorf("%d/%v: %d per %v named %q, want %d per %v", tc.limit, tc.window,
				got.GetRequestsPerUnit(), got.GetUnit(), got.GetName(), tc.perUnit, tc.unit)
		}
	}
	if got := currentLimit("login", 2, limiter.RuleState{Limit: 20, WindowMs: 3_600_000}).GetName(); got != "login/3600" {
		t.Errorf("name of a rule of a two-rule policy: %q, want login/3600", got)
	}
	// A calendar quota is its limit per its period, named for it.
	for pd, unit := range map[limiter.Period]rlsv3.RateLimitResponse_RateLimit_Unit{
		limiter.Day: day, limiter.Week: rlsv3.RateLimitResponse_RateLimit_WEEK, limiter.Month: rlsv3.RateLimitResponse_RateLimit_MONTH,
	} {
		got := currentLimit("plan", 1, limiter.RuleState{Limit: 100_000, Period: pd, PeriodMs: 743 * 3_600_000})
		if got.GetRequestsPerUnit() != 100_000 || got.GetUnit() != unit || got.GetName() != "plan/"+string(pd) {
			t.Errorf("100000/%s: %d per %v named %q", pd, got.GetRequestsPerUnit(), got.GetUnit(), got.GetName())
		}
	}
}

// TestTranslate maps by domain and exact keys in order, and reads the cost.
func TestTranslate(t *testing.T) {
	maps := []Mapping{
		{Domain: "edge", Keys: []string{"a"}, Policy: "one"},
		{Domain: "edge", Keys: []string{"a", "b"}, Policy: "two"},
		{Domain: "mesh", Keys: []string{"a"}, Policy: "two"},
	}
	lookup := func(name string) (*httplimit.Policy, bool) {
		if name == "one" || name == "two" {
			return httplimit.Prepare(limiter.Policy{Name: name, Rules: []limiter.Rule{{Limit: 10, Window: time.Minute}}}), true
		}
		return nil, false
	}
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 2, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("a", "x"),
		desc("a", "x", "b", "y"),
		desc("b", "y", "a", "x"),
		desc("a", "x", "b", "y", "c", "z"),
		{Entries: desc("a", "x").Entries, HitsAddend: wrapperspb.UInt64(0)},
		{Entries: desc("a", "x").Entries, HitsAddend: wrapperspb.UInt64(7)},
	}}
	got, err := translate(req, maps, lookup, nil, prepareTest, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []check{
		{key: "x", policy: must(lookup("one")), cost: 2},
		{key: "x:y", policy: must(lookup("two")), cost: 2},
		{},
		{},
		{key: "x", policy: must(lookup("one")), cost: 1},
		{key: "x", policy: must(lookup("one")), cost: 7},
	}
	for i := range want {
		if got[i].key != want[i].key || policyName(got[i]) != policyName(want[i]) || got[i].cost != want[i].cost {
			t.Errorf("descriptor %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	req.Domain = "mesh"
	if got, _ := translate(req, maps, lookup, nil, prepareTest, false, nil); got[0].policy.Name != "two" || got[1].mapped() {
		t.Errorf("domain mesh: %+v", got)
	}
}

// policyName is the name of c's policy, "" when unmapped.
func policyName(c check) string {
	if !c.mapped() {
		return ""
	}
	return c.policy.Name
}

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func must(p *httplimit.Policy, _ bool) *httplimit.Policy { return p }

// TestClientKey keeps valid values readable and hashes the rest, so every
// key it makes is one the limiter takes.
func TestClientKey(t *testing.T) {
	long := strings.Repeat("v", 64)
	for _, tc := range []struct {
		values []string
		want   string
	}{
		{[]string{"10.0.0.1"}, "10.0.0.1"},
		{[]string{"2001:db8::/64", "GET"}, hashed("2001:db8::/64") + ":GET"},
		{[]string{"t1", "u1"}, "t1:u1"},
		{[]string{"t1:u1"}, hashed("t1:u1")},
		{[]string{"a+b=c"}, "a+b=c"},
		{[]string{long}, long},
		{[]string{long + "v"}, hashed(long + "v")},
		{[]string{""}, hashed("")},
		{[]string{"a b", "ok"}, hashed("a b") + ":ok"},
		{[]string{"{tag}"}, hashed("{tag}")},
		{[]string{long, long}, hashed(long) + ":" + long},
	} {
		got := clientKey(tc.values)
		if got != tc.want {
			t.Errorf("%q: %q, want %q", tc.values, got, tc.want)
		}
		if err := limiter.ValidateKey(got); err != nil {
			t.Errorf("%q: key %q: %v", tc.values, got, err)
		}
	}
}

// TestHeadersOnePerPolicy: the headers name each decided policy once, the
// most binding descriptor's, in the order policies first appear.
func TestHeadersOnePerPolicy(t *testing.T) {
	dec := func(policy string, allowed bool, retry int64, remaining int) outcome {
		return outcome{decided: true, d: limiter.Decision{Policy: policy, Allowed: allowed, RetryAfterMs: retry,
			Rules: []limiter.RuleState{{Limit: 10, WindowMs: 60_000, Remaining: remaining}}}}
	}
	format := func(_ *httplimit.Policy, d limiter.Decision) (string, string) {
		return d.Policy + ":" + map[bool]string{true: "ok", false: "over"}[d.Allowed] + ":" + strings.Repeat("r", d.Bound().Remaining), d.Policy
	}
	resp := respond([]outcome{
		dec("a", true, 0, 3),
		{},
		dec("b", false, 1500, 0),
		dec("a", true, 0, 1),
		dec("b", false, 2001, 0),
		dec("b", true, 0, 0),
		{err: errTest},
	}, format, false)
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	if got["RateLimit"] != "a:ok:r, b:over:" || got["RateLimit-Policy"] != "a, b" || got["Retry-After"] != "3" {
		t.Errorf("headers %v", got)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || resp.GetStatuses()[6].GetCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("response %v", resp)
	}
}

var errTest = errors.New("redis down")

// hashed is "sha256:" and the first 32 hex digits of v's SHA-256.
func hashed(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])[:32]
}

// prepareTest readies a policy made for one request, as the service does
// without a server's Prepare.
func prepareTest(p limiter.Policy) *httplimit.Policy { return httplimit.Prepare(p) }

// TestCompatOneMomentPerAnswer: in compat mode every status's duration until
// reset counts from one moment, as envoyproxy/ratelimit reads its clock once
// a request — two descriptors decided on either side of a second's edge say
// the same.
func TestCompatOneMomentPerAnswer(t *testing.T) {
	hour := int64(3_600_000)
	at := func(nowMs int64, allowed bool) outcome {
		return outcome{decided: true, d: limiter.Decision{Policy: "p", Allowed: allowed, NowMs: nowMs,
			Rules: []limiter.RuleState{{Limit: 3, WindowMs: hour, Remaining: map[bool]int{true: 2}[allowed]}}}}
	}
	edge := 500*hour + 315_000 // 315 s into an hour's window
	resp := compatRespond([]outcome{at(edge-1, false), at(edge+1, true)}, &Compat{}, false)
	a, b := resp.GetStatuses()[0].GetDurationUntilReset().GetSeconds(), resp.GetStatuses()[1].GetDurationUntilReset().GetSeconds()
	if a != b || a != 3600-315 {
		t.Fatalf("durations until reset %d and %d s, want both %d", a, b, 3600-315)
	}
}
