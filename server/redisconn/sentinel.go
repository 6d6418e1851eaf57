package redisconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// connectSentinel builds go-redis's failover client for a Sentinel URL:
// redis://s1:26379?master_name=mymaster&addr=s2:26379 (the host and every
// addr= are sentinels). go-redis asks a sentinel for the master on every new
// connection and, when the sentinels announce +switch-master, closes the
// connections to any other address. What it leaves out is added here:
//   - no connection to a master the sentinels are failing over
//     (sentinelGuard);
//   - a READONLY answer anywhere in a pipeline retires its connection
//     (go-redis looks at a pipeline's first reply only), so the next use
//     dials again and asks the sentinels: a demoted master is left at once;
//   - TLS names the host it dials (go-redis names the first sentinel's host
//     for every node, master included).
//
// close releases what the client does not (the guard's sentinel clients).
func connectSentinel(rawURL string, log *slog.Logger) (rdb *redis.Client, close func(), err error) {
	opt, err := redis.ParseFailoverURL(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to parse the Redis Sentinel URL: %w", err)
	}
	// No retries: a retried script may have run already and would record twice.
	opt.ContextTimeoutEnabled, opt.MaxRetries = true, -1
	if opt.DialTimeout == 0 {
		opt.DialTimeout = dialTimeout
	}
	guard := newSentinelGuard(opt, sentinelDialer(opt.DialTimeout, opt.TLSConfig, nil))
	opt.Dialer = sentinelDialer(opt.DialTimeout, opt.TLSConfig, guard)
	log.Info("using Redis Sentinel", "redis", "sentinel", "master_name", opt.MasterName, "sentinels", opt.SentinelAddrs)
	return redis.NewFailoverClient(opt), guard.close, nil
}

// sentinelDialer dials what the failover client resolved, a sentinel or the
// master one names, once guard (if any) allows it, with TLS for that host
// when the URL is rediss://, and watches the connection for READONLY answers
// (replicaWatch).
func sentinelDialer(timeout time.Duration, tlsConf *tls.Config, guard *sentinelGuard) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if guard != nil {
			if err := guard.allow(ctx, addr); err != nil {
				return nil, err
			}
		}
		d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if conf := tlsFor(tlsConf, addr); conf != nil {
			tc := tls.Client(c, conf)
			if err := tc.HandshakeContext(ctx); err != nil {
				_ = c.Close()
				return nil, err
			}
			return newReplicaWatch(tc), nil
		}
		return newReplicaWatch(c), nil
	}
}

// readOnlyReply is how a READONLY error reply starts in the byte stream:
// every reply begins a line.
var readOnlyReply = []byte("\n-READONLY ")

// errReplica retires a connection that answered READONLY.
var errReplica = errors.New("the connection answered READONLY: its server is a replica now")

// replicaWatch is a connection that notices a READONLY answer in what it
// reads, anywhere in a pipeline's replies, and from then on reports itself
// unusable to go-redis's pool. The pool checks every idle connection before
// handing it out (through syscall.Conn, as for a connection the server
// closed), so the retired connection is closed and the next one is dialed
// through the sentinels: the pipeline that saw READONLY keeps its replies,
// and the next one goes to the master the sentinels name.
//
// A false alarm (a value that happens to hold the marker) costs one
// reconnection, nothing else.
type replicaWatch struct {
	net.Conn
	// tail holds the stream's last len(readOnlyReply)-1 bytes, so a marker
	// split between two reads is seen; the stream starts as if after a line.
	tail    []byte
	replica atomic.Bool
}

func newReplicaWatch(c net.Conn) *replicaWatch {
	w := &replicaWatch{Conn: c, tail: make([]byte, 0, 2*len(readOnlyReply))}
	w.tail = append(w.tail, '\n')
	return w
}

func (c *replicaWatch) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.replica.Load() {
		c.scan(b[:n])
	}
	return n, err
}

func (c *replicaWatch) scan(b []byte) {
	k := len(readOnlyReply) - 1
	joint := append(c.tail, b[:min(len(b), k)]...) // fits tail's capacity: no allocation
	if bytes.Contains(joint, readOnlyReply) || bytes.Contains(b, readOnlyReply) {
		c.replica.Store(true)
		return
	}
	if len(b) >= k {
		c.tail = append(c.tail[:0], b[len(b)-k:]...)
	} else {
		c.tail = append(c.tail[:0], joint[max(0, len(joint)-k):]...)
	}
}

// SyscallConn is what go-redis's pool looks at before reusing a connection:
// a retired one answers with an error; a plain TCP connection lets the pool
// peek at its socket; a TLS one is not peeked at (as go-redis does for TLS).
func (c *replicaWatch) SyscallConn() (syscall.RawConn, error) {
	if c.replica.Load() {
		return nil, errReplica
	}
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return noPeek{}, nil
}

// noPeek is a RawConn that lets nothing look at its socket.
type noPeek struct{}

func (noPeek) Control(func(fd uintptr)) error    { return nil }
func (noPeek) Read(func(fd uintptr) bool) error  { return nil }
func (noPeek) Write(func(fd uintptr) bool) error { return nil }
