package server

import (
	"net"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratescope/ratescope/limiter/httplimit"
)

// What one client may hold, by default: TCP connections to the HTTP
// listener, and WebSocket viewers (per client and per instance). A cap of 0
// is no cap.
const (
	defaultMaxConnsPerClient   = 256
	defaultMaxViewers          = 20_000
	defaultMaxViewersPerClient = 64
)

// Why slots refused a client.
const (
	refusedClient   = "client"   // the client holds its cap
	refusedInstance = "instance" // the instance holds its cap
	refusedLabs     = "labs"     // Redis holds --max-labs labs
)

// slots counts what each client holds of something capped per client and in
// all: take before using one, give it back after. Clients holding nothing are
// forgotten, so the map is as large as the clients holding something now.
type slots[K comparable] struct {
	perClient, total int // 0: no cap

	mu   sync.Mutex
	held map[K]int
	sum  int
}

func newSlots[K comparable](perClient, total int) *slots[K] {
	return &slots[K]{perClient: perClient, total: total, held: map[K]int{}}
}

// take reserves one slot for client k; it answers "" when it did, else why
// not (refusedClient or refusedInstance).
func (s *slots[K]) take(k K) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch n := s.held[k]; {
	case s.perClient > 0 && n >= s.perClient:
		return refusedClient
	case s.total > 0 && s.sum >= s.total:
		return refusedInstance
	default:
		s.held[k] = n + 1
		s.sum++
		return ""
	}
}

// give returns a slot k took.
func (s *slots[K]) give(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.held[k]; n > 1 {
		s.held[k] = n - 1
	} else {
		delete(s.held, k)
	}
	s.sum--
}

// connLimiter is the HTTP listener with a cap on connections per client
// address (an IPv6 client by its /64): a connection beyond the cap is closed
// as soon as it is accepted, before a goroutine, a buffer or a request is
// spent on it, so a flood of idle connections from one address cannot use up
// the process's file descriptors. Trusted proxies carry many clients'
// connections and are exempt; they are read from the config in force at each
// accept.
type connLimiter struct {
	net.Listener
	slots   *slots[netip.Prefix]
	trusted func() httplimit.TrustedProxies
	refused prometheus.Counter
}

// limitConns wraps ln; perClient 0 leaves it as it is.
func limitConns(ln net.Listener, perClient int, trusted func() httplimit.TrustedProxies, refused prometheus.Counter) net.Listener {
	if perClient <= 0 {
		return ln
	}
	return &connLimiter{Listener: ln, slots: newSlots[netip.Prefix](perClient, 0), trusted: trusted, refused: refused}
}

// Accept returns the next connection within its client's cap, closing those
// beyond it.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tcp, ok := c.(*net.TCPConn)
		if !ok {
			return c, nil
		}
		peer := tcp.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
		if l.trusted().Trusts(peer) {
			return c, nil
		}
		client := clientPrefix(peer)
		if l.slots.take(client) != "" {
			l.refused.Inc()
			_ = c.Close()
			continue
		}
		return &countedConn{TCPConn: tcp, slots: l.slots, client: client}, nil
	}
}

// clientPrefix is the network one client holds: an IPv4 address, an IPv6 /64.
func clientPrefix(a netip.Addr) netip.Prefix {
	if a = a.Unmap(); a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.WithZone("").Prefix(64)
	return p
}

// countedConn gives its slot back when it is closed, the first time. It
// embeds the TCP connection itself, so net/http still finds what it uses
// (sendfile through ReadFrom, CloseWrite), and a hijacked WebSocket closes it
// the same way.
type countedConn struct {
	*net.TCPConn
	slots  *slots[netip.Prefix]
	client netip.Prefix
	once   sync.Once
}

func (c *countedConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(func() { c.slots.give(c.client) })
	return err
}
