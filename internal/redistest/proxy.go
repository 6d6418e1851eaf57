package redistest

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy between a test's clients and a Redis, which the test
// can pause: while paused, connections stay open, new ones are accepted, and
// no byte moves either way — all a client can see of a redis-server stopped
// with SIGSTOP. It works in front of any Redis, the embedded one included, so
// a test that needs Redis to stop answering, but no process to kill or
// restart, runs everywhere.
type Proxy struct {
	Addr string // host:port of the proxy
	URL  string // the Redis URL with the proxy's address

	target string
	ln     net.Listener
	done   chan struct{} // closed by close
	wg     sync.WaitGroup

	mu    sync.Mutex
	open  chan struct{} // closed while bytes may flow
	conns map[net.Conn]struct{}
}

// StartProxy starts a proxy to the Redis at redisURL, closed when the test ends.
func StartProxy(t testing.TB, redisURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(redisURL)
	if err != nil || u.Host == "" {
		t.Fatalf("failed to parse the Redis URL %q: %v", redisURL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{target: u.Host, ln: ln, done: make(chan struct{}), open: open, conns: map[net.Conn]struct{}{}}
	p.Addr = ln.Addr().String()
	u.Host = p.Addr
	p.URL = u.String()
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Pause stops every byte in both directions until Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already paused
	}
}

// Resume lets the held bytes and all that follow through.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close() // as a refused connection would be
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Go(func() { p.pipe(up, c) })
		p.wg.Go(func() { p.pipe(c, up) })
	}
}

// track registers a pair of connections for close; false once closing.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	default:
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies src to dst, holding each chunk while paused; when either side
// ends, both close.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while paused; false when the proxy closes meanwhile.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return true
	case <-p.done:
		return false
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	close(p.done)
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}
