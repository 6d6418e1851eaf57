package rls_test

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/rls"
)

// FuzzShouldRateLimit feeds the service any request a client could encode,
// decided by the real limiter: the answer is InvalidArgument or one status
// per descriptor consistent with the overall code — never a panic.
func FuzzShouldRateLimit(f *testing.F) {
	for _, req := range []*rlsv3.RateLimitRequest{
		request(0, "remote_address=10.0.0.1"),
		request(3, "remote_address=2001:db8::1,path=/a b", "generic_key=x", "header_match=y"),
		request(1<<31, "tenant=t"),
		{Domain: "edge"},
		request(0, "=x", "user="),
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	rdb := newRedis(f, redistest.URL(f))
	svc := rls.New(rls.Deps{
		Checker:  &httplimit.Checker{Limiter: limiter.New(rdb), Timeout: testTimeout},
		Policy:   prepared,
		Mappings: func() []rls.Mapping { return testMappings },
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(b, &req) != nil {
			return // gRPC refuses what does not decode before the service sees it
		}
		resp, err := svc.ShouldRateLimit(context.Background(), &req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v: %v, want InvalidArgument or an answer", &req, err)
			}
			return
		}
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
		over := false
		for _, st := range resp.GetStatuses() {
			over = over || st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
			if st.GetCode() == rlsv3.RateLimitResponse_UNKNOWN {
				t.Fatalf("a status without a code: %v", resp)
			}
		}
		if over != (resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT) {
			t.Fatalf("overall %v with statuses %v", resp.GetOverallCode(), resp.GetStatuses())
		}
	})
}
