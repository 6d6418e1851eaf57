package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StartTimeout bounds how long a redis-server may take to answer PING.
const StartTimeout = 10 * time.Second

// InstallHint says how to get a program the tests or the load tool need.
func InstallHint(program string) string {
	switch program {
	case "redis-server", "redis-cli":
		return "apt-get install -y redis-server (macOS: brew install redis)"
	case "chromium":
		return "apt-get install -y chromium"
	}
	return "install " + program
}

// Process is a redis-server this package started on a free port of 127.0.0.1,
// with no persistence and its files in a folder of its own. It is the core the
// test helpers (Start, StartCluster) and cmd/ratescope-load share; its errors
// are plain errors.
type Process struct {
	Addr string // 127.0.0.1:port
	URL  string // redis://127.0.0.1:port/0

	bin    string
	dir    string
	conf   string // a config file to start from (a sentinel's); empty: none
	port   int
	args   []string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	paused bool
}

// Launch starts redis-server from PATH with its files in dir and extra
// arguments appended to the standard ones, and waits until it answers PING
// (at most StartTimeout, or until ctx ends).
func Launch(ctx context.Context, dir string, args ...string) (*Process, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("failed to find redis-server on PATH (%s): %w", InstallHint("redis-server"), err)
	}
	return launchOnFreePort(ctx, &Process{bin: bin, dir: dir, args: args}, false)
}

// launchOnFreePort tries a few free ports: another process may take one
// between the look and redis-server's bind.
func launchOnFreePort(ctx context.Context, p *Process, cluster bool) (*Process, error) {
	var err error
	for range 5 {
		if p.port, err = freePort(cluster); err != nil {
			return nil, err
		}
		if err = p.launch(ctx); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("failed to start redis-server: %w", err)
	}
	return p, nil
}

func (p *Process) launch(ctx context.Context) error {
	p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
	p.URL = "redis://" + p.Addr + "/0"
	var args []string
	if p.conf != "" {
		args = append(args, p.conf)
	}
	args = append(args,
		"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", p.dir,
		"--daemonize", "no", "--protected-mode", "no")
	args = append(args, p.args...)
	logPath := filepath.Join(p.dir, "redis.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("failed to open redis-server's log: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(p.bin, args...)
	// Never inherit the caller's stdout: a background server holding it would
	// keep `go test` output pipes open (and it is where the load tool's report
	// goes). Its own process group keeps a terminal's Ctrl-C from killing it
	// before its owner stops it; the kernel kills it should its owner die.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("failed to run redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	err = WaitReady(ctx, StartTimeout, exited, func() error { return Ping(p.Addr) })
	if err == nil {
		return nil
	}
	p.Stop()
	out, _ := os.ReadFile(logPath)
	return fmt.Errorf("redis-server on port %d: %w\n%s", p.port, err, lastLines(string(out), 5))
}

// ErrExited is WaitReady's answer when the process ends before it is ready.
var ErrExited = errors.New("exited during start-up")

// WaitReady polls ready every 20 ms until it succeeds, exited (a process's
// end; may be nil) is closed, ctx ends or timeout passes.
func WaitReady(ctx context.Context, timeout time.Duration, exited <-chan struct{}, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s: %w", timeout, err)
		}
	}
}

// Pid is the server's process id, 0 when it is not running.
func (p *Process) Pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Version is what `redis-server --version` prints.
func (p *Process) Version() string {
	out, err := exec.Command(p.bin, "--version").Output()
	if err != nil {
		return "redis-server (version unknown)"
	}
	return strings.TrimSpace(string(out))
}

// Stop kills the server, as a crash would, and waits until it has exited.
// Calling it twice is harmless.
func (p *Process) Stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused process must be able to die
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd, p.paused = nil, false
}

// Restart starts the server again on the same port, empty.
func (p *Process) Restart(ctx context.Context) error {
	p.Stop()
	var err error
	for range 50 { // the port may linger a moment after the kill
		if err = p.launch(ctx); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("failed to restart redis-server: %w", err)
	}
	return nil
}

// Pause freezes the server with SIGSTOP: connections stay open, nothing answers.
func (p *Process) Pause() error {
	err := p.signal(syscall.SIGSTOP)
	p.paused = p.paused || err == nil
	return err
}

// Resume undoes Pause.
func (p *Process) Resume() error {
	err := p.signal(syscall.SIGCONT)
	p.paused = p.paused && err != nil
	return err
}

// Answering reports whether the server runs and is not paused.
func (p *Process) Answering() bool { return p.cmd != nil && !p.paused }

func (p *Process) signal(sig syscall.Signal) error {
	if p.cmd == nil {
		return errors.New("failed to signal redis-server: it is not running")
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("failed to signal redis-server: %w", err)
	}
	return nil
}

// FreePort returns a port of 127.0.0.1 that nobody listens on right now.
func FreePort() (int, error) { return freePort(false) }

// freePort finds a port nobody listens on. A cluster node also needs
// port+10000 for its bus, so those come from a range where that fits.
func freePort(cluster bool) (int, error) {
	if !cluster {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("failed to find a free port: %w", err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for range 200 {
		p := 20000 + rand.IntN(25000)
		if portFree(p) && portFree(p+10000) {
			return p, nil
		}
	}
	return 0, errors.New("failed to find a free port pair for a cluster node")
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// Ping sends PING over a raw connection to addr and expects +PONG.
func Ping(addr string) error {
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
