package rls_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

const (
	ok        = rlsv3.RateLimitResponse_OK
	overLimit = rlsv3.RateLimitResponse_OVER_LIMIT
)

// TestConcurrentCallsAllowExactlyTheLimit: 500 concurrent ShouldRateLimit
// calls on one descriptor of a 37/60s policy get exactly 37 OKs.
func TestConcurrentCallsAllowExactlyTheLimit(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	req := request(0, "user="+newValue())
	const calls = 500
	var wg sync.WaitGroup
	codes := make(chan rlsv3.RateLimitResponse_Code, calls)
	for range calls {
		wg.Go(func() {
			resp, err := h.client.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Error(err)
				return
			}
			if resp.GetOverallCode() != resp.GetStatuses()[0].GetCode() {
				t.Errorf("overall %v but the descriptor %v", resp.GetOverallCode(), resp.GetStatuses()[0].GetCode())
			}
			codes <- resp.GetOverallCode()
		})
	}
	wg.Wait()
	close(codes)
	n := map[rlsv3.RateLimitResponse_Code]int{}
	for c := range codes {
		n[c]++
	}
	if n[ok] != 37 || n[overLimit] != calls-37 {
		t.Fatalf("got %d OK and %d OVER_LIMIT, want exactly 37 and %d", n[ok], n[overLimit], calls-37)
	}
	if got := len(h.seen()); got != calls {
		t.Errorf("OnDecision saw %d decisions, want %d", got, calls)
	}
}

// TestTwoDescriptorsOneOver: a request whose first descriptor is over its
// limit and whose second is not is OVER_LIMIT, with both statuses right and
// both policies in the RateLimit headers.
func TestTwoDescriptorsOneOver(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	ip, global := "remote_address="+newValue(), "generic_key="+newValue()
	for range 3 {
		h.call(t, request(0, ip))
	}
	resp := h.call(t, request(0, ip, global))
	if resp.GetOverallCode() != overLimit {
		t.Fatalf("overall %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	over, fine := resp.GetStatuses()[0], resp.GetStatuses()[1]
	if over.GetCode() != overLimit || over.GetLimitRemaining() != 0 || over.GetDurationUntilReset().AsDuration() <= 0 {
		t.Errorf("first status %v, want OVER_LIMIT, 0 remaining, a retry", over)
	}
	wantLimit(t, over, "ip", 3, rlsv3.RateLimitResponse_RateLimit_MINUTE)
	if fine.GetCode() != ok || fine.GetLimitRemaining() != 99 || fine.GetDurationUntilReset().AsDuration() != 0 {
		t.Errorf("second status %v, want OK, 99 remaining, no retry", fine)
	}
	wantLimit(t, fine, "global", 100, rlsv3.RateLimitResponse_RateLimit_MINUTE)

	seen := h.seen()
	denied, allowed := seen[len(seen)-2], seen[len(seen)-1]
	if denied.Policy != "ip" {
		denied, allowed = allowed, denied
	}
	rl1, rlp1 := formatHeaders(denied)
	rl2, rlp2 := formatHeaders(allowed)
	retry := (over.GetDurationUntilReset().AsDuration().Milliseconds() + 999) / 1000
	want := map[string]string{
		"RateLimit":        rl1 + ", " + rl2,
		"RateLimit-Policy": rlp1 + ", " + rlp2,
		"Retry-After":      strconv.FormatInt(retry, 10),
	}
	if got := headers(t, resp); !equalMaps(got, want) {
		t.Errorf("headers %v, want %v", got, want)
	}
	if !strings.HasPrefix(want["RateLimit-Policy"], `"ip";q=3;w=60, "global";q=100;w=60`) {
		t.Errorf("RateLimit-Policy %q", want["RateLimit-Policy"])
	}
	if n := h.windowCount(t, strings.TrimPrefix(global, "generic_key="), "global"); n != 1 {
		t.Errorf("the allowed descriptor recorded %d entries, want 1", n)
	}
}

// TestOneItemPerPolicy: two descriptors of one policy give one item in the
// headers, the one that binds (here the denied one).
func TestOneItemPerPolicy(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	full, fresh := "remote_address="+newValue(), "remote_address="+newValue()
	for range 3 {
		h.call(t, request(0, full))
	}
	resp := h.call(t, request(0, fresh, full))
	if c := resp.GetStatuses(); c[0].GetCode() != ok || c[1].GetCode() != overLimit {
		t.Fatalf("statuses %v, want OK then OVER_LIMIT", c)
	}
	rl := headers(t, resp)["RateLimit"]
	if strings.Count(rl, `"ip"`) != 1 || !strings.HasPrefix(rl, `"ip";r=0;`) {
		t.Errorf("RateLimit %q, want one item, the denied descriptor's", rl)
	}
}

func wantLimit(t *testing.T, st *rlsv3.RateLimitResponse_DescriptorStatus, name string, perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit) {
	t.Helper()
	l := st.GetCurrentLimit()
	if l.GetName() != name || l.GetRequestsPerUnit() != perUnit || l.GetUnit() != unit {
		t.Errorf("current_limit %v, want %q %d per %v", l, name, perUnit, unit)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestHitsAddend: hits_addend is the cost — 3 counts 3 in the log, a cost
// with no room is denied without being recorded, 0 counts 1, and a
// descriptor's own hits_addend overrides the request's.
func TestHitsAddend(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	v := newValue()
	steps := []struct {
		hits       uint32
		descHits   *wrapperspb.UInt64Value
		code       rlsv3.RateLimitResponse_Code
		remaining  uint32
		logEntries int
	}{
		{hits: 3, code: ok, remaining: 2, logEntries: 3},
		{hits: 3, code: overLimit, remaining: 2, logEntries: 3},
		{hits: 0, code: ok, remaining: 1, logEntries: 4},
		{hits: 5, descHits: wrapperspb.UInt64(1), code: ok, remaining: 0, logEntries: 5},
	}
	for i, s := range steps {
		req := request(s.hits, "tenant="+v)
		req.Descriptors[0].HitsAddend = s.descHits
		st := h.call(t, req).GetStatuses()[0]
		if st.GetCode() != s.code || st.GetLimitRemaining() != s.remaining {
			t.Errorf("step %d: %v with %d remaining, want %v with %d", i, st.GetCode(), st.GetLimitRemaining(), s.code, s.remaining)
		}
		if n := h.windowCount(t, v, "cost"); n != s.logEntries {
			t.Errorf("step %d: the log holds %d entries, want %d", i, n, s.logEntries)
		}
	}
}

// TestCostNeverAllowed: a cost the policy can never allow — above its
// smallest limit, or above 1,000 on a log — is OVER_LIMIT, never an error
// (Envoy lets a failed call's request through), and nothing is recorded or
// decided; the request's other descriptors are decided as usual.
func TestCostNeverAllowed(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	v := newValue()
	for _, tc := range []struct {
		name      string
		req       *rlsv3.RateLimitRequest
		st        int    // the never-allowed status
		limitName string // its current_limit's name
	}{
		{"above the smallest limit", request(4, "remote_address="+v), 0, "ip"},
		{"far out of range", request(1<<32-1, "remote_address="+v), 0, "ip"},
		{"a descriptor's own cost", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			descriptor("generic_key=" + v), {Entries: descriptor("remote_address=" + v).Entries, HitsAddend: wrapperspb.UInt64(1 << 40)}}}, 1, "ip"},
		{"above 1,000 on a log", request(1001, "big="+v), 0, "big"},
		{"above the smaller rule", request(3, "multi="+v), 0, "multi/10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(h.seen())
			resp := h.call(t, tc.req)
			st := resp.GetStatuses()[tc.st]
			if resp.GetOverallCode() != overLimit || st.GetCode() != overLimit || st.GetCurrentLimit().GetName() != tc.limitName ||
				st.GetLimitRemaining() != 0 || st.GetDurationUntilReset().AsDuration() != 0 {
				t.Fatalf("got %v, want OVER_LIMIT under %s with nothing remaining and no reset", resp, tc.limitName)
			}
			for _, hv := range resp.GetResponseHeadersToAdd() {
				if hv.GetKey() == "Retry-After" {
					t.Errorf("Retry-After %q for a cost no wait lets pass", hv.GetValue())
				}
			}
			if n := len(h.seen()) - before; n != len(tc.req.GetDescriptors())-1 {
				t.Errorf("%d decisions, want %d (the other descriptors only)", n, len(tc.req.GetDescriptors())-1)
			}
		})
	}
	for _, p := range []string{"ip", "big", "multi"} {
		if n := h.windowCount(t, v, p); n != 0 {
			t.Errorf("policy %s: the log holds %d entries, want none", p, n)
		}
	}
	// A cost of 1,000 on the log is an ordinary check.
	if st := h.call(t, request(1000, "big="+v)).GetStatuses()[0]; st.GetCode() != ok || h.windowCount(t, v, "big") != 1000 {
		t.Fatalf("cost 1000: %v, %d entries", st, h.windowCount(t, v, "big"))
	}
}

// TestDurationUntilResetIsExact: a denied descriptor's duration_until_reset
// is the limiter's exact retry — the oldest entry's score plus the window,
// minus Redis's clock at the decision (read from the log itself) — and
// points at the same instant as the HTTP API's retryAfterMs for the same
// window.
func TestDurationUntilResetIsExact(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	for _, tc := range []struct{ policy, desc string }{
		{"ip", "remote_address=" + newValue()},
		{"multi", "remote_address=" + newValue() + ",path=/login"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			var st *rlsv3.RateLimitResponse_DescriptorStatus
			for st.GetCode() != overLimit {
				st = h.call(t, request(0, tc.desc)).GetStatuses()[0]
				if st.GetCode() == ok && st.GetDurationUntilReset().AsDuration() != 0 {
					t.Fatalf("allowed with duration_until_reset %v, want 0", st.GetDurationUntilReset().AsDuration())
				}
			}
			seen := h.seen()
			d := seen[len(seen)-1]
			p, _ := lookup(tc.policy)
			w, err := h.lim.Window(context.Background(), d.Key, p)
			if err != nil {
				t.Fatal(err)
			}
			b := d.Bound()
			var oldestInRule int64 = -1
			for _, e := range w.Entries {
				if e.Ms > d.NowMs-b.WindowMs {
					oldestInRule = e.Ms
					break
				}
			}
			want := time.Duration(oldestInRule+b.WindowMs-d.NowMs) * time.Millisecond
			got := st.GetDurationUntilReset().AsDuration()
			if got != want || got != time.Duration(d.RetryAfterMs)*time.Millisecond {
				t.Fatalf("duration_until_reset %v, want %v (oldest %d + window %d - now %d), limiter said %d ms",
					got, want, oldestInRule, b.WindowMs, d.NowMs, d.RetryAfterMs)
			}
		})
	}
}

// TestUnmappedDescriptors are OK with no limit and count nothing: unknown
// keys, keys in another order, another domain, and a mapping whose policy a
// reload removed.
func TestUnmappedDescriptors(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	v := newValue()
	for _, req := range []*rlsv3.RateLimitRequest{
		request(0, "header_match="+v),
		request(0, "path=/,remote_address="+v),
		request(0, "remote_address="+v+",path=/,method=GET"),
		request(0, "gone="+v),
		{Domain: "other", Descriptors: request(0, "remote_address="+v).Descriptors},
		request(1000, "header_match="+v), // a cost no policy takes is no error where none applies
	} {
		resp := h.call(t, req)
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != ok || st.GetCode() != ok || st.GetCurrentLimit() != nil || st.GetDurationUntilReset() != nil {
			t.Errorf("%v: got %v, want OK with no limit", req, resp)
		}
		if len(resp.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("%v: headers %v, want none", req, resp.GetResponseHeadersToAdd())
		}
	}
	if n := len(h.seen()); n != 0 {
		t.Errorf("%d decisions made for unmapped descriptors", n)
	}
	// Beside a mapped one, the mapped one is decided and the other stays OK.
	resp := h.call(t, request(0, "header_match="+v, "remote_address="+v))
	if st := resp.GetStatuses(); st[0].GetCurrentLimit() != nil || st[1].GetCurrentLimit().GetName() != "ip" {
		t.Errorf("statuses %v", st)
	}
}

// TestMalformedRequests get InvalidArgument naming the field, and nothing is
// counted — not even the request's valid descriptors.
func TestMalformedRequests(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	v := newValue()
	valid := descriptor("remote_address=" + v)
	many := make([]*ratelimitv3.RateLimitDescriptor, 65)
	for i := range many {
		many[i] = valid
	}
	for _, tc := range []struct {
		name, field string
		req         *rlsv3.RateLimitRequest
	}{
		{"empty request", "domain", &rlsv3.RateLimitRequest{}},
		{"no domain", "domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{valid}}},
		{"no descriptors", "descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}},
		{"too many descriptors", "descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}},
		{"no entries", "descriptors[1].entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{valid, {}}}},
		{"empty key", "descriptors[1].entries[0].key", request(0, "remote_address="+v, "=x")},
		{"negative hits", "descriptors[0].is_negative_hits", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: valid.Entries, IsNegativeHits: true}}}},
		{"override of no unit", "descriptors[1].limit.unit", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			valid, {Entries: valid.Entries, Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client.ShouldRateLimit(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
				t.Fatalf("got %v, want InvalidArgument about %s", err, tc.field)
			}
		})
	}
	if n := h.windowCount(t, v, "ip"); n != 0 || len(h.seen()) != 0 {
		t.Errorf("malformed requests recorded %d entries and %d decisions", n, len(h.seen()))
	}
}

// TestKeysFromValues: values join with ":" into the client key; a value
// outside the key alphabet or over 64 bytes becomes sha256:<32 hex>, so any
// value Envoy sends is limited, each distinct value on its own window.
func TestKeysFromValues(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	v := newValue()
	for _, tc := range []struct{ desc, key string }{
		{"remote_address=2001:db8::1", "sha256:5afd19e856d1c18d17d600dfd2b5f534"}, // holds ":"
		{"remote_address=" + v + ",path=/login", v + ":/login"},
		{"remote_address=" + v + ",path=/a b", v + ":sha256:73c9c45d21e1dbbab5ec7d874b3972a9"},
		{"remote_address=" + strings.Repeat("a", 65), "sha256:635361c48bb9eab14198e76ea8ab7f1a"},
	} {
		h.call(t, request(0, tc.desc))
		seen := h.seen()
		if got := seen[len(seen)-1].Key; got != tc.key {
			t.Errorf("%s: key %q, want %q", tc.desc, got, tc.key)
		}
	}
}

// TestDescriptorKeysInjective: [tenant=t1, user=u1] and [user="t1:u1"],
// mapped to one policy, are two windows: the value holding ":" is hashed.
func TestDescriptorKeysInjective(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	t1, u1 := newValue(), newValue()
	h.call(t, request(0, "tenant="+t1+",user="+u1))
	h.call(t, request(0, "user="+t1+":"+u1))
	seen := h.seen()
	a, b := seen[len(seen)-2], seen[len(seen)-1]
	if a.Policy != "burst" || b.Policy != "burst" || a.Key == b.Key {
		t.Fatalf("keys %q (%s) and %q (%s), want two keys of burst", a.Key, a.Policy, b.Key, b.Policy)
	}
	if a.Key != t1+":"+u1 || !strings.HasPrefix(b.Key, "sha256:") {
		t.Errorf("keys %q and %q, want %q and a hash", a.Key, b.Key, t1+":"+u1)
	}
	for _, k := range []string{a.Key, b.Key} {
		if n := h.windowCount(t, k, "burst"); n != 1 {
			t.Errorf("window %q holds %d entries, want 1", k, n)
		}
	}
}

// TestDurationMatchesHTTPAPI: for the same window, the HTTP API's
// retryAfterMs and the gRPC duration_until_reset end at the same instant on
// Redis's clock, and the HTTP API is just as denied.
func TestDurationMatchesHTTPAPI(t *testing.T) {
	url := redistest.URL(t)
	h := serve(t, url, nil)
	app := apptest.Start(t, map[string]string{"REDIS_URL": url}, "--policy", testPolicies[0])
	v := newValue()
	var st *rlsv3.RateLimitResponse_DescriptorStatus
	for st.GetCode() != overLimit {
		st = h.call(t, request(0, "remote_address="+v)).GetStatuses()[0]
	}
	seen := h.seen()
	d := seen[len(seen)-1]

	resp, err := http.Post(app.URL+"/api/v1/check?policy=ip&key="+v, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		NowMs, RetryAfterMs int64
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("HTTP check answered %d, want 429", resp.StatusCode)
	}
	grpcEnd := d.NowMs + st.GetDurationUntilReset().AsDuration().Milliseconds()
	if httpEnd := body.NowMs + body.RetryAfterMs; grpcEnd != httpEnd {
		t.Fatalf("gRPC: now %d + %d ms = %d; HTTP: now %d + retryAfterMs %d = %d; want the same instant",
			d.NowMs, grpcEnd-d.NowMs, grpcEnd, body.NowMs, body.RetryAfterMs, httpEnd)
	}
}
