package envoyconf_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/envoyconf"
)

// entries reads "k=v,k2=v2".
func entries(s string) []envoyconf.Entry {
	var out []envoyconf.Entry
	for part := range strings.SplitSeq(s, ",") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		out = append(out, envoyconf.Entry{Key: k, Value: v})
	}
	return out
}

// TestLookup checks the matching rules of envoyproxy/ratelimit's README
// and source on the feature fixtures: which limit a descriptor gets (its
// policy's name, "" for none), the window it shares, and its statistics key.
func TestLookup(t *testing.T) {
	s := loadDir(t, "testdata/features", envoyconf.Options{})
	cases := []struct {
		name, domain, entries string
		policy, stat          string
		shared                []string
		unlimited             bool
	}{
		{name: "key only", domain: "edge", entries: "remote_address=10.0.0.1", policy: "edge.remote_address", stat: "edge.remote_address"},
		{name: "value before key", domain: "edge", entries: "remote_address=203.0.113.9", policy: "edge.remote_address_203.0.113.9", stat: "edge.remote_address_203.0.113.9"},
		{name: "unlimited", domain: "edge", entries: "remote_address=198.51.100.1", policy: "edge.remote_address_198.51.100.1", stat: "edge.remote_address_198.51.100.1", unlimited: true},
		{name: "middle wildcard", domain: "edge", entries: "path=/api/v2/export", policy: "edge.path_/api/*/export", stat: "edge.path_/api/*/export"},
		{name: "wildcard star matches nothing too", domain: "edge", entries: "path=/api//export", policy: "edge.path_/api/*/export", stat: "edge.path_/api/*/export"},
		{name: "wildcard needs its suffix", domain: "edge", entries: "path=/api/v2/import", policy: "edge.path", stat: "edge.path_/api/v2/import"},
		{name: "wildcard parts may not overlap", domain: "edge", entries: "path=/api/export", policy: "edge.path", stat: "edge.path_/api/export"},
		{name: "shared window", domain: "edge", entries: "path=/files/a.pdf", policy: "edge.path_/files/*", stat: "edge.path_/files/*", shared: []string{"/files/*"}},
		{name: "detailed metric", domain: "edge", entries: "path=/about", policy: "edge.path", stat: "edge.path_/about"},
		{name: "nested", domain: "messaging", entries: "message_type=marketing,to_number=555", policy: "messaging.message_type_marketing.to_number", stat: "messaging.message_type_marketing.to_number"},
		{name: "nested value unknown", domain: "messaging", entries: "message_type=receipt,to_number=555"},
		{name: "shallower than the tree", domain: "messaging", entries: "message_type=marketing"},
		{name: "deeper than the tree", domain: "messaging", entries: "to_number=555,from=1"},
		{name: "top level", domain: "messaging", entries: "to_number=555", policy: "messaging.to_number", stat: "messaging.to_number"},
		{name: "value to metric", domain: "messaging", entries: "tenant=acme,user=bob", policy: "messaging.tenant.user", stat: "messaging.tenant_acme.user"},
		// A request's value stands in a statistics key as in a client key:
		// over 64 bytes or outside the key alphabet, hashed.
		{name: "detailed metric, a long value", domain: "edge", entries: "path=/" + strings.Repeat("a", 64), policy: "edge.path", stat: "edge.path_sha256:a0305bf503bbd9ef3f1a06abd9b40eff"},
		{name: "value to metric, a value of a space", domain: "messaging", entries: "tenant=a b,user=bob", policy: "messaging.tenant.user", stat: "messaging.tenant_sha256:c8687a08aa5d6ed2044328fa6a697ab8.user"},
		{name: "unknown key", domain: "edge", entries: "user=bob"},
		{name: "unknown domain", domain: "nope", entries: "remote_address=10.0.0.1"},
		{name: "no entries", domain: "edge", entries: ""},
		// envoyproxy/ratelimit looks up key_value, then key: an entry whose
		// key spells a composite key finds that descriptor.
		{name: "composite spelling", domain: "edge", entries: "remote_address_203.0.113.9=", policy: "edge.remote_address_203.0.113.9", stat: "edge.remote_address_203.0.113.9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := s.Lookup(c.domain, entries(c.entries))
			policy := ""
			if m.Limit != nil {
				policy = m.Limit.Policy.Name
			}
			if policy != c.policy || m.StatKey != c.stat || !slices.Equal(m.Shared, c.shared) {
				t.Fatalf("got policy %q stat %q shared %q, want %q %q %q", policy, m.StatKey, m.Shared, c.policy, c.stat, c.shared)
			}
			if m.Limit != nil && m.Limit.Unlimited != c.unlimited {
				t.Fatalf("unlimited %v", m.Limit.Unlimited)
			}
		})
	}
}

func TestLookupLimitFields(t *testing.T) {
	s := loadDir(t, "testdata/features", envoyconf.Options{})
	m := s.Lookup("messaging", entries("message_type=marketing,to_number=1"))
	if l := m.Limit; l.Name != "marketing_per_number" || l.RequestsPerUnit != 2 || l.Unit.String() != "DAY" || l.Quota {
		t.Fatalf("%+v", l)
	}
	m = s.Lookup("messaging", entries("priority=high,to_number=1"))
	if !slices.Equal(m.Limit.Replaces, []string{"marketing_per_number"}) {
		t.Fatalf("replaces %v", m.Limit.Replaces)
	}
	m = s.Lookup("messaging", entries("quota_bucket=q"))
	if !m.Limit.Quota || m.Limit.Unit.String() != "WEEK" {
		t.Fatalf("%+v", m.Limit)
	}
	m = s.Lookup("messaging", entries("tenant=a,user=b"))
	if !m.Limit.Policy.Shadow {
		t.Fatal("shadow_mode not a shadow policy")
	}
}

// TestOverrideNames: a limit override is decided under the name of the
// policy it overrides — shared when its window is that policy's one window,
// else with the window's seconds — and never of a name the request makes.
func TestOverrideNames(t *testing.T) {
	minute := limiter.Policy{Name: "edge.user", Rules: []limiter.Rule{{Limit: 3, Window: time.Minute}}}
	for _, c := range []struct {
		what string
		of   limiter.Policy
		rpu  uint32
		unit envoyconf.Unit
		want string
		alg  limiter.Algorithm
	}{
		{"its window", minute, 10, rlsv3.RateLimitResponse_RateLimit_MINUTE, "edge.user", limiter.Log},
		{"another window", minute, 10, rlsv3.RateLimitResponse_RateLimit_HOUR, "edge.user/3600", limiter.Log},
		{"no limit: the domain", limiter.Policy{Name: "edge"}, 10, rlsv3.RateLimitResponse_RateLimit_SECOND, "edge/1", limiter.Log},
		{"two rules", limiter.Policy{Name: "login", Rules: []limiter.Rule{{Limit: 5, Window: time.Minute}, {Limit: 20, Window: time.Hour}}},
			10, rlsv3.RateLimitResponse_RateLimit_MINUTE, "login/60", limiter.Log},
		{"more than the log keeps", minute, limiter.MaxLogLimit + 1, rlsv3.RateLimitResponse_RateLimit_MINUTE, "edge.user", limiter.Fixed},
	} {
		p, ok := envoyconf.Override(limiter.Policy{Algorithm: limiter.Log}, c.of, c.rpu, c.unit)
		if !ok || p.Name != c.want || p.AlgorithmName() != c.alg || p.Shadow || len(p.Rules) != 1 || p.Rules[0].Limit != int(c.rpu) {
			t.Errorf("%s: %+v, want %q decided by %s", c.what, p, c.want, c.alg)
		}
	}
	if _, ok := envoyconf.Override(limiter.Policy{}, minute, 1, rlsv3.RateLimitResponse_RateLimit_UNKNOWN); ok {
		t.Error("an override of no unit was taken")
	}
}
