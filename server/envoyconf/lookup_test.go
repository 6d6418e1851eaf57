package envoyconf_test

import (
	"slices"
	"strings"
	"testing"

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
