// Package redistest gives tests a Redis, and the load tool a redis-server.
//
// A test that only talks to Redis calls URL: RATESCOPE_TEST_REDIS_URL when
// set, else a redis-server of its own when one is on PATH, else the embedded
// in-process Redis `go run .` uses (its parity with a real one is tested in
// limiter). A test that needs a real server's behaviour — a process to stop,
// pause or restart (Start), a cluster (StartCluster), anything the embedded
// server does not implement (RealURL) — is skipped without redis-server, or
// fails when RATESCOPE_TEST_STRICT=1 (as in CI), so a missing prerequisite can
// never pass silently. Run, called from TestMain, then says once per package
// what a missing program cost and how to install it.
//
// Under the test helpers is a core with plain errors (Launch, LaunchCluster,
// Ping, FreePort, AnyRedis) that cmd/ratescope-load uses too.
package redistest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/embedredis"
)

// EnvStrict turns a missing prerequisite into a failure.
const EnvStrict = "RATESCOPE_TEST_STRICT"

// Strict reports whether missing prerequisites must fail tests.
func Strict() bool { return os.Getenv(EnvStrict) == "1" }

// Need skips the test, or fails it under RATESCOPE_TEST_STRICT=1, when program
// is not on PATH, and returns its path. Run counts the skips and names the
// program once for the package.
func Need(t testing.TB, program string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err == nil {
		return path
	}
	if Strict() {
		t.Fatalf("needs %s, which is not on PATH, and %s=1 makes that a failure (%s)", program, EnvStrict, InstallHint(program))
	}
	absent.skip(program, t.Name())
	t.Skipf("needs %s (not on PATH)", program)
	return ""
}

// URL returns the address of a Redis for a test that only needs one to talk
// to: RATESCOPE_TEST_REDIS_URL when set, else a fresh redis-server when one is
// on PATH, else a fresh embedded Redis. Instances of the app that must share a
// Redis share this URL.
func URL(t testing.TB) string {
	t.Helper()
	url, kind, stop, err := AnyRedis(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if kind == Embedded {
		absent.embedded(t.Name())
	}
	return url
}

// RealURL returns the address of a real Redis, for a test that relies on
// behaviour the embedded one lacks: RATESCOPE_TEST_REDIS_URL when set, else a
// fresh redis-server (skipped without one, failed under strict).
func RealURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return Start(t).URL
}

// EmbeddedURL starts the embedded Redis for this test alone, whatever else
// is installed, and returns its address.
func EmbeddedURL(t testing.TB) string {
	t.Helper()
	e, err := embedredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.URL()
}

// Server is a redis-server owned by a test, which may stop, pause and restart
// it (on the same port) to simulate faults; a failure to do so fails the test.
type Server struct {
	Addr string // host:port
	URL  string // redis://host:port/0

	t testing.TB
	p *Process
}

// Start starts a standalone redis-server on a free port, stopped when the
// test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	Need(t, "redis-server")
	p, err := Launch(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return &Server{Addr: p.Addr, URL: p.URL, t: t, p: p}
}

// Client returns a client of this server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the server (as a crash would). Calling it twice is harmless.
func (s *Server) Stop() { s.p.Stop() }

// Restart starts the server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.p.Restart(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// Pause freezes the server with SIGSTOP: connections stay open, nothing answers.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.p.Pause(); err != nil {
		s.t.Fatal(err)
	}
}

// Stall makes the server hold every client's commands for d (CLIENT PAUSE
// … ALL): the command returns at once, and whatever is sent next runs d
// late — so an answer computed from when a command was sent, rather than
// when Redis ran it, shows its error.
func (s *Server) Stall(d time.Duration) {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	if err := c.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		s.t.Fatalf("failed to stall Redis: %v", err)
	}
}

// Resume undoes Pause.
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.p.Resume(); err != nil {
		s.t.Fatal(err)
	}
}

// Cluster is a Redis Cluster of three masters owned by a test.
type Cluster struct {
	Addrs []string
	// URL is the form ratescope's REDIS_URL takes for a cluster:
	// redis://h1:p1?addr=h2:p2&addr=h3:p3
	URL   string
	t     testing.TB
	nodes []*Process
}

// StartCluster starts a three-node cluster, stopped when the test ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, 0)
}

// StartClusterWithReplicas starts a cluster of three masters with a replica
// each, stopped when the test ends.
func StartClusterWithReplicas(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, 1)
}

func startCluster(t testing.TB, replicas int) *Cluster {
	t.Helper()
	Need(t, "redis-server")
	Need(t, "redis-cli")
	nodes, err := launchCluster(context.Background(), t.TempDir(), replicas)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { StopAll(nodes) })
	c := &Cluster{t: t, nodes: nodes}
	for _, n := range nodes {
		c.Addrs = append(c.Addrs, n.Addr)
	}
	c.URL = ClusterURL(c.Addrs)
	return c
}

// PauseReplicaOf freezes (SIGSTOP) the replica of the master at addr until
// the test ends.
func (c *Cluster) PauseReplicaOf(master string) {
	c.t.Helper()
	r, err := ReplicaOf(context.Background(), c.nodes, master)
	if err == nil {
		err = r.Pause()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = r.Resume() })
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Run runs the package's tests; call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }
//
// Afterwards it stops the Shared Redis and prints one line per missing
// program: how many tests it cost and how to install it. A plain `go test
// ./...` shows a passing package's output to no one, so without -v the
// lines also go to the terminal the tests run in, when there is one.
func Run(m *testing.M) int {
	code := m.Run()
	shared.stop()
	tell(absent.summary(), os.Stdout, testing.Verbose(), openTerminal)
	return code
}

// tell prints lines to out and, unless verbose (then go test shows out),
// to the terminal open finds.
func tell(lines []string, out io.Writer, verbose bool, open func() (io.WriteCloser, error)) {
	if len(lines) == 0 {
		return
	}
	for _, line := range lines {
		fmt.Fprintln(out, line)
	}
	if verbose {
		return
	}
	tty, err := open()
	if err != nil {
		return // no terminal: CI, which runs strict and fails instead
	}
	defer tty.Close()
	for _, line := range lines {
		fmt.Fprintln(tty, line)
	}
}

// openTerminal opens the controlling terminal for writing.
func openTerminal() (io.WriteCloser, error) {
	name := "/dev/tty"
	if runtime.GOOS == "windows" {
		name = "CONOUT$"
	}
	return os.OpenFile(name, os.O_WRONLY, 0)
}

// Shared returns the address of one Redis (AnyRedis's choice) for the whole
// test binary, started on first use and stopped by Run: for code that has no
// testing.TB, such as an Example.
func Shared() (string, error) { return shared.url() }
