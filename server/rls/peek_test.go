package rls_test

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
)

// TestPeeks: a descriptor's own hits_addend of 0 asks whether one more
// request would pass now, and records nothing; it is no decision for the
// live view.
func TestPeeks(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	v := newValue()
	peek := func() *rlsv3.RateLimitRequest {
		req := request(0, "remote_address="+v)
		req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
		return req
	}
	for i := 0; i < 3; i++ {
		st := h.call(t, peek()).GetStatuses()[0]
		if st.GetCode() != ok || st.GetLimitRemaining() != uint32(3-i) || st.GetCurrentLimit().GetName() != "ip" {
			t.Fatalf("peek %d: %v", i, st)
		}
		if st := h.call(t, request(0, "remote_address="+v)).GetStatuses()[0]; st.GetCode() != ok || st.GetLimitRemaining() != uint32(2-i) {
			t.Fatalf("check %d after a peek: %v", i, st)
		}
	}
	resp := h.call(t, peek())
	if st := resp.GetStatuses()[0]; resp.GetOverallCode() != overLimit || st.GetDurationUntilReset().AsDuration() <= 0 {
		t.Fatalf("peek at a full window: %v, want OVER_LIMIT with the wait", resp)
	}
	if n := h.windowCount(t, v, "ip"); n != 3 || len(h.seen()) != 3 {
		t.Fatalf("%d entries and %d decisions, want the 3 checks'", n, len(h.seen()))
	}
}

// TestLimitOverride: a descriptor's limit override is the rule its policy
// decides by, reported in the override's unit: on the policy's window when
// it is the policy's one window, else on a window of its own, named for the
// policy and the window's seconds — a log cannot hold two windows.
func TestLimitOverride(t *testing.T) {
	h := serve(t, redistest.URL(t), nil)
	v := newValue()
	withOverride := func(rpu uint32, unit typev3.RateLimitUnit) *rlsv3.RateLimitRequest {
		req := request(0, "remote_address="+v)
		req.Descriptors[0].Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return req
	}
	for i := 0; i < 3; i++ { // ip=3/60s is full
		h.call(t, request(0, "remote_address="+v))
	}
	st := h.call(t, withOverride(10, typev3.RateLimitUnit_MINUTE)).GetStatuses()[0]
	if st.GetCode() != ok || st.GetLimitRemaining() != 6 || st.GetCurrentLimit().GetName() != "ip" ||
		st.GetCurrentLimit().GetRequestsPerUnit() != 10 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("10 per minute over 3 entries: %v", st)
	}
	st = h.call(t, withOverride(10, typev3.RateLimitUnit_HOUR)).GetStatuses()[0]
	if st.GetCode() != ok || st.GetLimitRemaining() != 9 || st.GetCurrentLimit().GetName() != "ip/3600" ||
		st.GetCurrentLimit().GetRequestsPerUnit() != 10 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("10 per hour, a window of its own: %v", st)
	}
	if resp := h.call(t, withOverride(0, typev3.RateLimitUnit_SECOND)); resp.GetOverallCode() != overLimit {
		t.Fatalf("an override of 0: %v", resp)
	}
	if n := h.windowCount(t, v, "ip"); n != 4 {
		t.Fatalf("%d entries, want 4: an override of the policy's window counts on it", n)
	}
	if n := h.rdb.ZCard(context.Background(), redisdata.LogKey(v, "ip/3600")).Val(); n != 1 {
		t.Fatalf("%d entries, want 1 on the hour's own window", n)
	}
}
