// Package embedredis runs an in-process Redis-protocol server (miniredis) on a
// real loopback TCP port, so `go run .` needs no setup. It is for the demo and
// for tests on a machine without redis-server; limiter's
// TestEmbeddedMatchesRealRedis runs every decision path on it and on a real
// redis-server and requires the same answers.
package embedredis

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// Server is a running embedded Redis.
type Server struct {
	m *miniredis.Miniredis
}

// Start listens on 127.0.0.1 on a free port. Keys' time to live follows the
// wall clock exactly: miniredis's ClockTTL advances every TTL by the time
// elapsed since the previous command, before each command runs, so a key
// never loses time from before it existed. (A ticker calling FastForward
// cannot promise that: a late tick followed by a prompt one takes a long step
// from a key written just before it, and a log that expires early lets a
// client in before its exact retry time.) miniredis's TIME — the limiter's
// clock — is the wall clock too.
func Start() (*Server, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("failed to start the embedded Redis: %w", err)
	}
	return &Server{m: m}, nil
}

// Addr is host:port of the server.
func (s *Server) Addr() string { return s.m.Addr() }

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.m.Addr() + "/0" }

// Close stops the server.
func (s *Server) Close() { s.m.Close() }
