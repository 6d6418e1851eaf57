package rls_test

// Benchmarks of the service itself, in process (no gRPC transport), on a real
// redis-server:
//
//	go test -run '^$' -bench ShouldRateLimit -benchmem ./server/rls/
//
// "cached" is a flood's call: one descriptor of a client the local deny
// cache already knows is over its limit, answered with no Redis round trip;
// its allocs/op are the answer's (the response and its statuses, limits and
// headers) and nothing per call besides. "allowed" is an all-allowed call
// of 64 callers at once, over 10,000 clients of a limit none reaches: what
// a call costs in process when Redis decides it, batched as under load.

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/rls"
)

func BenchmarkShouldRateLimit(b *testing.B) {
	rdb := newRedis(b, redistest.URL(b))
	lim := limiter.New(rdb)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- lim.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-ran })
	// Policies prepared once, as the server keeps them.
	policies := map[string]*httplimit.Policy{}
	for _, s := range testPolicies {
		p, err := limiter.ParsePolicy(s)
		if err != nil {
			b.Fatal(err)
		}
		policies[p.Name] = httplimit.Prepare(p)
	}
	svc := rls.New(rls.Deps{
		Checker: &httplimit.Checker{Limiter: lim, Timeout: testTimeout},
		Policy: func(name string) (*httplimit.Policy, bool) {
			p, ok := policies[name]
			return p, ok
		},
		Mappings: func() []rls.Mapping { return testMappings },
	})
	flood := request(0, "user="+newValue())
	for i := 0; ; i++ { // fill the window, until the deny cache answers
		resp, err := svc.ShouldRateLimit(ctx, flood)
		if err != nil {
			b.Fatal(err)
		}
		if lim.DenyCacheStats().Denials > 0 {
			break
		}
		if i > 1000 {
			b.Fatalf("the deny cache never answered: %v", resp)
		}
	}
	b.Run("allowed", func(b *testing.B) {
		reqs := make([]*rlsv3.RateLimitRequest, 10_000)
		for i := range reqs {
			reqs[i] = request(0, "big=u-"+strconv.Itoa(i))
		}
		var next atomic.Int64
		b.SetParallelism(32) // 64 callers on 2 cores
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req := reqs[next.Add(1)%int64(len(reqs))]
				resp, err := svc.ShouldRateLimit(ctx, req)
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Errorf("%v, %v", resp, err)
					return
				}
			}
		})
	})
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := svc.ShouldRateLimit(ctx, flood)
			if err != nil || resp.GetOverallCode() != overLimit {
				b.Fatalf("%v, %v", resp, err)
			}
		}
	})
}
