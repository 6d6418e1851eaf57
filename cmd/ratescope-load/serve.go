package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/server"
)

// Start-up and shutdown bounds of the child processes.
const (
	startTimeout = 15 * time.Second
	stopTimeout  = 10 * time.Second
)

// serveMain is the server under test: this binary re-executed as
// "ratescope-load serve [flags]", so the server has a process (memory, CPU,
// file descriptors) of its own. Flags are ratescope's; REDIS_URL comes from the
// environment. It returns the exit code.
func serveMain(args []string) int {
	// server.Run raises the open-files limit itself.
	if path := os.Getenv(serverProfileEnv); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			return 1
		}
		defer stop()
	}
	if err := server.Run(context.Background(), append([]string{"ratescope"}, args...), os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	return 0
}

// serverProfileEnv names a file the server child writes its CPU profile to,
// from start to shutdown, for finding where a request's time goes:
//
//	RATESCOPE_LOAD_SERVER_CPUPROFILE=/tmp/server.pprof go run ./cmd/ratescope-load --skip-lib --skip-ws
//	go tool pprof -top /tmp/server.pprof
const serverProfileEnv = "RATESCOPE_LOAD_SERVER_CPUPROFILE"

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("failed to create the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("failed to start the CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// raiseFileLimit lifts RLIMIT_NOFILE's soft limit to the hard limit, so
// thousands of viewers can connect, and returns the limit now in force.
func raiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("failed to read RLIMIT_NOFILE: %w", err)
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, fmt.Errorf("failed to set RLIMIT_NOFILE to %d: %w", l.Max, err)
		}
	}
	return l.Cur, nil
}

// child is a process this tool started and must stop: its own process group
// (so a terminal's Ctrl-C reaches only this tool, which then stops it in
// order), killed by the kernel should this tool die first.
type child struct {
	name   string
	cmd    *exec.Cmd
	log    string        // its stdout and stderr
	exited chan struct{} // closed when it has exited
}

func startChild(name, logPath string, env []string, bin string, args ...string) (*child, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("failed to create %s's log: %w", name, err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	// Never share this tool's stdout: the report goes there.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	return c, nil
}

// stop asks the process to end (SIGTERM) and kills it if it has not within
// stopTimeout. Calling it again is harmless.
func (c *child) stop() {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(stopTimeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// logTail returns the last lines the process wrote, for error messages.
func (c *child) logTail() string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// waitReady polls ready until it succeeds, the process exits, ctx ends or
// startTimeout passes.
func (c *child) waitReady(ctx context.Context, ready func() error) error {
	switch err := redistest.WaitReady(ctx, startTimeout, c.exited, ready); {
	case errors.Is(err, redistest.ErrExited):
		return fmt.Errorf("%s exited during start-up: %s", c.name, c.logTail())
	case err != nil:
		return fmt.Errorf("%s did not become ready: %w", c.name, err)
	}
	return nil
}

// serverProc is a server under test, in its own process.
type serverProc struct {
	*child
	addr string // 127.0.0.1:port
}

// startServer re-executes this binary as "serve" with REDIS_URL=redisURL and
// args (ratescope flags) on a free port, and waits until /healthz answers.
// Every client of this tool is one address (127.0.0.1), so the caps on
// connections and viewers per client are off: it measures the server, not
// its caps.
func startServer(ctx context.Context, dir, redisURL string, args ...string) (*serverProc, error) {
	uncapped := []string{"--max-conns-per-client", "0", "--max-viewers", "0", "--max-viewers-per-client", "0"}
	return startProc(ctx, dir, "the ratescope server", "server.log", []string{"REDIS_URL=" + redisURL}, "serve", append(uncapped, args...)...)
}

// startReference runs the reference server (reference.go), this binary
// re-executed as "reference", on a free port.
func startReference(ctx context.Context, dir string, args ...string) (*serverProc, error) {
	return startProc(ctx, dir, "the reference server", "reference.log", nil, "reference", args...)
}

// startProc re-executes this binary with the hidden first argument mode, extra
// environment and args plus --addr on a free port, and waits until /healthz
// answers.
func startProc(ctx context.Context, dir, name, logName string, env []string, mode string, args ...string) (*serverProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("failed to find this program to re-execute it: %w", err)
	}
	env = append(os.Environ(), env...)
	var lastErr error
	for range 3 {
		port, err := redistest.FreePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c, err := startChild(name, filepath.Join(dir, logName), env, self,
			append([]string{mode, "--addr", addr}, args...)...)
		if err != nil {
			return nil, err
		}
		s := &serverProc{child: c, addr: addr}
		if lastErr = c.waitReady(ctx, s.healthz); lastErr == nil {
			return s, nil
		}
		c.stop()
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("failed to start %s: %w", name, lastErr)
}

var probe = &http.Client{Timeout: 2 * time.Second}

func (s *serverProc) healthz() error { return s.answers("/healthz") }

// answers reports whether GET path answers 200.
func (s *serverProc) answers(path string) error {
	resp, err := probe.Get("http://" + s.addr + path)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", path, resp.Status)
	}
	return nil
}

// metrics reads the named unlabelled values from the server's /metrics.
func (s *serverProc) metrics(names ...string) (map[string]float64, error) {
	resp, err := probe.Get("http://" + s.addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("failed to read /metrics: %w", err)
	}
	defer resp.Body.Close()
	got := make(map[string]float64, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("failed to read metric %s: %w", name, err)
		}
		got[name] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("failed to read /metrics: %w", err)
	}
	for _, n := range names {
		if _, ok := got[n]; !ok {
			return nil, fmt.Errorf("failed to find metric %s in /metrics", n)
		}
	}
	return got, nil
}
