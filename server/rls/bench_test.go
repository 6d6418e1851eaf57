package rls_test

// Benchmarks of the service itself, in process (no gRPC transport), on a real
// redis-server:
//
//	go test -run '^$' -bench ShouldRateLimit -benchmem ./server/rls/
//
// "cached" is a flood's call: one descriptor of a client the local deny
// cache already knows is over its limit, answered with no Redis round trip;
// its allocs/op are the answer's (the response and its statuses, limits and
// headers) and nothing per call besides.

import (
	"context"
	"testing"

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
