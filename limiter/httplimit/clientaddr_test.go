package httplimit_test

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

func TestClientAddr(t *testing.T) {
	cases := []struct {
		name    string
		trusted []string
		peer    string
		xff     []string // header lines
		want    string
	}{
		{"no proxies: the peer", nil, "203.0.113.7:5123", nil, "203.0.113.7"},
		{"no proxies: X-Forwarded-For is ignored", nil, "203.0.113.7:5123", []string{"198.51.100.1"}, "203.0.113.7"},
		{"untrusted peer: its X-Forwarded-For is ignored", []string{"10.0.0.0/8"}, "203.0.113.7:5123", []string{"198.51.100.1"}, "203.0.113.7"},
		{"trusted peer: the entry it appended", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"203.0.113.7"}, "203.0.113.7"},
		{"spoofed leftmost value is not believed", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"198.51.100.66, 203.0.113.7"}, "203.0.113.7"},
		{"many spoofed values", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"1.1.1.1, 2.2.2.2, 3.3.3.3, 203.0.113.7"}, "203.0.113.7"},
		{"a chain of trusted proxies is skipped", []string{"10.0.0.0/8", "192.168.1.5"}, "10.0.0.1:80", []string{"198.51.100.66, 203.0.113.7, 192.168.1.5, 10.0.0.9"}, "203.0.113.7"},
		{"spoofed trusted address left of the client", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"10.0.0.5, 203.0.113.7"}, "203.0.113.7"},
		{"repeated header lines in order", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"198.51.100.66", "203.0.113.7, 10.0.0.2"}, "203.0.113.7"},
		{"all hops trusted: the farthest", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		{"trusted peer without X-Forwarded-For: the peer", []string{"10.0.0.0/8"}, "10.0.0.1:80", nil, "10.0.0.1"},
		{"entry with a port", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"203.0.113.7:4711"}, "203.0.113.7"},
		{"entry in brackets with a port", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"[2001:db8:aa:bb:1:2:3:4]:443"}, "2001:db8:aa:bb::/64"},
		{"entry in brackets without a port", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"[2001:db8:aa:bb::9]"}, "2001:db8:aa:bb::/64"},
		{"IPv6 peer keyed by its /64", nil, "[2001:db8:1:2:3:4:5:6]:1234", nil, "2001:db8:1:2::/64"},
		{"two IPv6 addresses of one /64 share a key", nil, "[2001:db8:1:2:ffff::1]:1234", nil, "2001:db8:1:2::/64"},
		{"IPv6 entry behind an IPv6 proxy", []string{"2001:db8:ffff::/48"}, "[2001:db8:ffff::1]:80", []string{"2001:db8:5:6::77"}, "2001:db8:5:6::/64"},
		{"IPv4-mapped peer counts as IPv4", []string{"10.0.0.0/8"}, "[::ffff:10.0.0.1]:80", []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
		{"zone dropped", nil, "[fe80::1%eth0]:80", nil, "fe80::/64"},
		{"garbage stops the walk at the hop that passed it", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"203.0.113.7, unknown, 10.0.0.2"}, "10.0.0.2"},
		{"garbage right at the peer", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"not-an-address"}, "10.0.0.1"},
		{"empty entry", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"203.0.113.7, "}, "10.0.0.1"},
		{"too many octets", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"1.2.3.4.5"}, "10.0.0.1"},
		{"unclosed bracket", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"[2001:db8::1"}, "10.0.0.1"},
		{"host name instead of an address", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"evil.example.com"}, "10.0.0.1"},
		{"spaces around entries", []string{"10.0.0.0/8"}, "10.0.0.1:80", []string{"  203.0.113.7  ,10.0.0.2 "}, "203.0.113.7"},
		{"trusted single address", []string{"127.0.0.1"}, "127.0.0.1:9", []string{"203.0.113.7"}, "203.0.113.7"},
		{"peer without a port", nil, "203.0.113.7", nil, "203.0.113.7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			trusted, err := httplimit.ParseTrustedProxies(tc.trusted)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			for _, line := range tc.xff {
				r.Header.Add("X-Forwarded-For", line)
			}
			got, err := httplimit.ClientAddr(r, trusted)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("ClientAddr = %q, want %q", got, tc.want)
			}
			if limiter.ValidateKey(got) != nil {
				t.Fatalf("%q is not a valid client key", got)
			}
		})
	}
}

func TestClientAddrBadPeer(t *testing.T) {
	for _, peer := range []string{"", "@", "pipe", "host:80", "[::1"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		if got, err := httplimit.ClientAddr(r, httplimit.TrustedProxies{}); err == nil {
			t.Errorf("peer %q: got %q, want an error", peer, got)
		}
	}
}

func TestParseTrustedProxies(t *testing.T) {
	tp, err := httplimit.ParseTrustedProxies([]string{"10.0.0.0/8", " 127.0.0.1 ", "::1", "2001:db8::/32", "", "10.1.2.3/8"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(tp.Strings(), " "), "10.0.0.0/8 127.0.0.1/32 ::1/128 2001:db8::/32 10.0.0.0/8"; got != want {
		t.Fatalf("Strings = %q, want %q", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "localhost", "10.0.0", "1.2.3.4/x"} {
		if _, err := httplimit.ParseTrustedProxies([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: err = %v, want one naming it", bad, err)
		}
	}
	peer := func(addr string) bool {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		return tp.TrustsPeer(r)
	}
	if !peer("10.9.9.9:1") || !peer("[::1]:2") || peer("11.0.0.1:1") || peer("garbage") {
		t.Fatal("TrustsPeer is wrong")
	}
	for addr, want := range map[string]bool{"10.9.9.9": true, "::ffff:127.0.0.1": true, "::1": true, "11.0.0.1": false, "2001:db9::1": false} {
		if got := tp.Trusts(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Trusts(%s) = %v, want %v", addr, got, want)
		}
	}
}
