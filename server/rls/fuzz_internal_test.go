package rls

import (
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// FuzzTranslate: whatever the request, translate returns an error naming a
// field, or checks whose keys the limiter takes, whose costs are in range
// and whose policy is the one the mapping names.
func FuzzTranslate(f *testing.F) {
	f.Add("edge", "remote_address", "10.0.0.1", "", "", uint32(0), uint64(0), false)
	f.Add("edge", "remote_address", "2001:db8::1", "path", "/a b", uint32(3), uint64(2), true)
	f.Add("edge", "user", "", "", "", uint32(1<<31), uint64(1<<63), true)
	f.Add("", "remote_address", "x", "", "", uint32(1), uint64(0), false)
	f.Add("edge", "", "{x}", "path", strings.Repeat("é", 80), uint32(9), uint64(0), false)
	maps := []Mapping{
		{Domain: "edge", Keys: []string{"remote_address"}, Policy: "one"},
		{Domain: "edge", Keys: []string{"remote_address", "path"}, Policy: "two"},
		{Domain: "edge", Keys: []string{"user"}, Policy: "missing"},
	}
	lookup := func(name string) (*httplimit.Policy, bool) {
		switch name {
		case "one":
			return httplimit.Prepare(limiter.Policy{Name: name, Rules: []limiter.Rule{{Limit: 5, Window: time.Second}}}), true
		case "two":
			return httplimit.Prepare(limiter.Policy{Name: name, Rules: []limiter.Rule{{Limit: 3, Window: time.Second}, {Limit: 50, Window: time.Hour}}}), true
		}
		return nil, false
	}
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits uint32, descHits uint64, useDescHits bool) {
		d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k1, Value: v1}}}
		if k2 != "" || v2 != "" {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k2, Value: v2})
		}
		if useDescHits {
			d.HitsAddend = wrapperspb.UInt64(descHits)
		}
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{d, desc("other", v1)}}
		checks, err := translate(req, maps, lookup, nil, prepareTest, false, nil)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "domain:") && !strings.HasPrefix(err.Error(), "descriptors") && !strings.HasPrefix(err.Error(), "hits_addend:") {
				t.Fatalf("error names no field: %v", err)
			}
			return
		}
		if len(checks) != 2 || checks[1].mapped() {
			t.Fatalf("checks %+v for a request of two descriptors, the second unmapped", checks)
		}
		c := checks[0]
		if !c.mapped() {
			return
		}
		if err := limiter.ValidateKey(c.key); err != nil {
			t.Fatalf("key %q from %q, %q: %v", c.key, v1, v2, err)
		}
		if c.cost < 1 || c.cost > c.policy.SmallestLimit() {
			t.Fatalf("cost %d for policy %v", c.cost, c.policy)
		}
		if name, _ := policyFor(maps, domain, []string{k1, k2}[:len(d.Entries)]); name != c.policy.Name {
			t.Fatalf("policy %q, the mapping says %q", c.policy.Name, name)
		}
	})
}
