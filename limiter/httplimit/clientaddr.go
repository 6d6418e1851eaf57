package httplimit

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies are the proxies whose X-Forwarded-For entries are believed:
// addresses and networks. The zero value trusts no proxy.
type TrustedProxies struct {
	prefixes []netip.Prefix
}

// ParseTrustedProxies reads CIDRs ("10.0.0.0/8") and addresses ("127.0.0.1",
// "::1"); an address is a network of one. An entry that is neither is an
// error naming it.
func ParseTrustedProxies(entries []string) (TrustedProxies, error) {
	var t TrustedProxies
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), max(0, p.Bits()-96))
			}
			t.prefixes = append(t.prefixes, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil {
			return TrustedProxies{}, fmt.Errorf("trusted proxy %q: want an address such as 10.0.0.1 or a CIDR such as 10.0.0.0/8", e)
		}
		a = a.Unmap().WithZone("")
		t.prefixes = append(t.prefixes, netip.PrefixFrom(a, a.BitLen()))
	}
	return t, nil
}

// Empty reports whether no proxy is trusted.
func (t TrustedProxies) Empty() bool { return len(t.prefixes) == 0 }

// Strings gives the proxies back in CIDR form.
func (t TrustedProxies) Strings() []string {
	out := make([]string, len(t.prefixes))
	for i, p := range t.prefixes {
		out[i] = p.String()
	}
	return out
}

// contains reports whether a is a trusted proxy.
func (t TrustedProxies) contains(a netip.Addr) bool {
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// TrustsPeer reports whether the connection r arrived on comes from a trusted
// proxy: forward auth answers only those when any are configured.
func (t TrustedProxies) TrustsPeer(r *http.Request) bool {
	peer, ok := parseHop(r.RemoteAddr)
	return ok && t.contains(peer)
}

// Trusts reports whether addr is a trusted proxy: for a connection's peer
// before any request arrives on it, e.g. to exempt proxies from a cap on
// connections per client.
func (t TrustedProxies) Trusts(addr netip.Addr) bool {
	return t.contains(addr.Unmap().WithZone(""))
}

// ClientAddr is who sent r: an IPv4 address as text ("203.0.113.7"), an IPv6
// client as its /64 in CIDR form ("2001:db8:1:2::/64"), as one household or
// customer usually holds a whole /64. As a client key it goes through
// JoinKey, which hashes the IPv6 form (it holds ":").
//
// The client is the rightmost X-Forwarded-For address, then the connection's
// peer, that is not a trusted proxy: each trusted proxy appends the address it
// was reached from, so the entries right of the client were written by
// proxies it cannot influence, and everything left of it may be forged. With
// no trusted proxies, or a peer that is not one, the client is the peer and
// X-Forwarded-For is ignored. The leftmost value is never believed for being
// leftmost. An entry that is no address (garbage, "unknown", empty) ends the
// walk: the client is the last hop that could be identified. Ports and IPv6
// brackets and zones are dropped; IPv4-mapped IPv6 addresses count as IPv4.
//
// Every entry point (the middleware, forward auth) keys clients with this one
// function.
func ClientAddr(r *http.Request, trusted TrustedProxies) (string, error) {
	client, ok := parseHop(r.RemoteAddr)
	if !ok {
		return "", fmt.Errorf("failed to read the peer address %q", r.RemoteAddr)
	}
	if trusted.contains(client) {
		hops := forwardedFor(r.Header)
		for i := len(hops) - 1; i >= 0; i-- {
			a, ok := parseHop(hops[i])
			if !ok {
				break
			}
			client = a
			if !trusted.contains(a) {
				break
			}
		}
	}
	return addrKey(client), nil
}

// forwardedFor lists every X-Forwarded-For entry, in order, across repeated
// header lines.
func forwardedFor(h http.Header) []string {
	var hops []string
	for _, line := range h.Values("X-Forwarded-For") {
		for hop := range strings.SplitSeq(line, ",") {
			hops = append(hops, strings.TrimSpace(hop))
		}
	}
	return hops
}

// parseHop reads one address as a peer or an X-Forwarded-For entry writes it:
// "203.0.113.7", "203.0.113.7:5123", "2001:db8::1", "[2001:db8::1]:443".
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			end := strings.IndexByte(s, ']')
			if end < 0 || end != len(s)-1 {
				return netip.Addr{}, false
			}
			host = s[1:end]
		}
		s = host
	} else if strings.Count(s, ":") == 1 {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		s = host
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// addrKey is an address in client-key form: IPv4 as text, IPv6 as its /64.
func addrKey(a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}
