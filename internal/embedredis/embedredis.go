// Package embedredis runs an in-process Redis-protocol server (miniredis) on a
// real loopback TCP port, so `go run .` needs no setup. It is for the demo and
// for tests on a machine without redis-server; limiter's
// TestEmbeddedMatchesRealRedis runs every decision path on it and on a real
// redis-server and requires the same answers.
package embedredis

import (
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// ttlStep is how often keys' time to live advances. miniredis's TTL clock only
// moves when told to, while its TIME (the limiter's clock) is the real one.
// Each step's time is applied one step late: a key written just before a tick
// would otherwise lose time from before it existed and expire up to ttlStep
// early — letting a full window pass before its exact retry time. Late is
// harmless: every algorithm counts by score or stored time, never by expiry.
const ttlStep = 250 * time.Millisecond

// Server is a running embedded Redis.
type Server struct {
	m    *miniredis.Miniredis
	stop chan struct{}
	done chan struct{}
}

// Start listens on 127.0.0.1 on a free port and lets key expiry follow the
// wall clock until Close.
func Start() (*Server, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("failed to start the embedded Redis: %w", err)
	}
	s := &Server{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go s.expire()
	return s, nil
}

func (s *Server) expire() {
	defer close(s.done)
	t := time.NewTicker(ttlStep)
	defer t.Stop()
	last := time.Now()
	var pending time.Duration // the previous step's time, applied at this one
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.m.FastForward(pending)
			pending, last = now.Sub(last), now
		}
	}
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return s.m.Addr() }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.m.Addr() + "/0" }

// Close stops the server.
func (s *Server) Close() {
	close(s.stop)
	<-s.done
	s.m.Close()
}
