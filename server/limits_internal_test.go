package server

import (
	"net/netip"
	"testing"
)

// TestClientPrefix: an IPv4 client is its address, an IPv6 client its /64,
// so one household's or customer's addresses share one cap.
func TestClientPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7":              "203.0.113.7/32",
		"2001:db8:1:2:aaaa::1":     "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::9":     "2001:db8:1:2::/64",
		"2001:db8:1:3::1":          "2001:db8:1:3::/64",
		"fe80::1%eth0":             "fe80::/64",
		"::ffff:203.0.113.7":       "203.0.113.7/32",
		"2001:db8:ffff:ffff:1::":   "2001:db8:ffff:ffff::/64",
		"2001:0db8:0001:0002::abc": "2001:db8:1:2::/64",
	} {
		if got := clientPrefix(netip.MustParseAddr(in)).String(); got != want {
			t.Errorf("clientPrefix(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestSlots: a client holds at most perClient, everyone together at most
// total; a slot given back can be taken again, and a client holding nothing
// is forgotten.
func TestSlots(t *testing.T) {
	s := newSlots[string](2, 3)
	for i, tc := range []struct {
		client, want string
	}{
		{"a", ""}, {"a", ""}, {"a", refusedClient}, {"b", ""}, {"c", refusedInstance}, {"a", refusedClient},
	} {
		if got := s.take(tc.client); got != tc.want {
			t.Fatalf("take %d (%s) = %q, want %q", i, tc.client, got, tc.want)
		}
	}
	s.give("b")
	if got := s.take("c"); got != "" {
		t.Fatalf("take c after b gave one back = %q", got)
	}
	s.give("a")
	s.give("a")
	s.give("c")
	if len(s.held) != 0 || s.sum != 0 {
		t.Fatalf("after every slot came back: held %v, sum %d", s.held, s.sum)
	}
	open := newSlots[string](0, 0)
	for range 1000 {
		if got := open.take("a"); got != "" {
			t.Fatalf("no caps refused: %q", got)
		}
	}
}
