// Package redistest starts real redis-server processes for tests: a standalone
// server or a three-node Redis Cluster, each on free ports in its own temporary
// folder, stopped when the test ends.
//
// When redis-server is not on PATH the test is skipped with a message naming
// it, or fails when RATESCOPE_TEST_STRICT=1 (as in CI), so a missing
// prerequisite can never pass silently.
package redistest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvURL names a Redis to use instead of starting one (standalone only).
const EnvURL = "RATESCOPE_TEST_REDIS_URL"

// EnvStrict turns a missing prerequisite into a failure.
const EnvStrict = "RATESCOPE_TEST_STRICT"

const startTimeout = 10 * time.Second

// Strict reports whether missing prerequisites must fail tests.
func Strict() bool { return os.Getenv(EnvStrict) == "1" }

// Need skips the test, or fails it under RATESCOPE_TEST_STRICT=1, when program
// is not on PATH, and returns its path.
func Need(t testing.TB, program string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found on PATH (install it, e.g. apt-get install -y redis-server chromium)", program)
	if Strict() {
		t.Fatalf("%s; %s=1 makes this a failure", msg, EnvStrict)
	}
	t.Skip(msg)
	return ""
}

// Server is one redis-server process owned by a test.
type Server struct {
	Addr string // host:port
	URL  string // redis://host:port/0

	t    testing.TB
	bin  string
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
}

// URL returns the address of a Redis for a test that only needs one to talk to:
// RATESCOPE_TEST_REDIS_URL when set, else a fresh server of its own.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return Start(t).URL
}

// Start starts a standalone redis-server on a free port. The test may stop,
// pause and restart it (on the same port) to simulate faults.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Need(t, "redis-server")
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	var err error
	for range 5 {
		s.port = freePort(t, false)
		if err = s.launch(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("failed to start redis-server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) launch() error {
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	s.URL = "redis://" + s.Addr + "/0"
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--protected-mode", "no",
	}, s.args...)
	log, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(s.bin, args...)
	// Never inherit the test's stdout: a background server holding it would
	// keep `go test` output pipes open.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.cmd = nil
			out, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, lastLines(string(out), 5))
		default:
		}
		if ping(s.Addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	s.cmd = nil
	return fmt.Errorf("redis-server on port %d did not answer PING within %s", s.port, startTimeout)
}

// Client returns a client of this server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop kills the server (as a crash would). Calling it twice is harmless.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused process must be able to die
	_ = s.cmd.Process.Kill()
	for ping(s.Addr) == nil {
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}

// Restart starts the server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	var err error
	for range 50 { // the port may linger a moment after the kill
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("failed to restart redis-server: %v", err)
}

// Pause freezes the server with SIGSTOP: connections stay open, nothing answers.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume undoes Pause.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatalf("redis-server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("failed to signal redis-server: %v", err)
	}
}

// Cluster is a three-node Redis Cluster (masters only) owned by a test.
type Cluster struct {
	Addrs []string
	// URL is the form ratescope's REDIS_URL takes for a cluster:
	// redis://h1:p1?addr=h2:p2&addr=h3:p3
	URL   string
	nodes []*Server
}

// StartCluster starts three cluster-enabled redis-servers, joins them with
// redis-cli --cluster create and waits for cluster_state:ok.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := Need(t, "redis-server")
	cli := Need(t, "redis-cli")
	c := &Cluster{}
	for range 3 {
		s := &Server{t: t, bin: bin, dir: t.TempDir(), args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		}}
		var err error
		for range 5 {
			s.port = freePort(t, true)
			if err = s.launch(); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("failed to start a cluster node: %v", err)
		}
		t.Cleanup(s.Stop)
		c.nodes = append(c.nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("failed to create the cluster: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !c.ok() {
		if time.Now().After(deadline) {
			t.Fatalf("cluster did not reach cluster_state:ok")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.URL = "redis://" + c.Addrs[0] + "?addr=" + c.Addrs[1] + "&addr=" + c.Addrs[2]
	return c
}

func (c *Cluster) ok() bool {
	for _, n := range c.nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := cl.ClusterInfo(context.Background()).Result()
		_ = cl.Close()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
	}
	return true
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	c.nodes[0].t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// freePort finds a port nobody listens on. A cluster node also needs port+10000
// for its bus, so those come from a range where that fits.
func freePort(t testing.TB, cluster bool) int {
	t.Helper()
	for range 200 {
		if !cluster {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("failed to find a free port: %v", err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			_ = l.Close()
			return port
		}
		p := 20000 + rand.IntN(25000)
		if portFree(p) && portFree(p+10000) {
			return p
		}
	}
	t.Fatalf("failed to find a free port")
	return 0
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 7)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "+PONG") {
		return fmt.Errorf("unexpected reply %q", buf[:n])
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
