package apptest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ratescope/ratescope/server"
)

// A test binary re-executed by StartProcess finds these in its environment.
const (
	envChild       = "RATESCOPE_APPTEST_CHILD"  // "1": run the server, not the tests
	envChildNofile = "RATESCOPE_APPTEST_NOFILE" // the open-files limit, soft and hard
)

// RunChild runs the server and exits when this test binary was re-executed
// by StartProcess, and returns at once otherwise. Call it first in TestMain.
func RunChild() {
	if os.Getenv(envChild) != "1" {
		return
	}
	if n := os.Getenv(envChildNofile); n != "" {
		limit, err := strconv.ParseUint(n, 10, 64)
		if err == nil {
			err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: limit})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "apptest child: failed to set the open-files limit:", err)
			os.Exit(2)
		}
	}
	args := []string{"ratescope"}
	for i, a := range os.Args {
		if a == "--" {
			args = append(args, os.Args[i+1:]...)
			break
		}
	}
	if err := server.Run(context.Background(), args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "apptest child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// StartProcess is Start in a process of its own — this test binary run
// again, whose TestMain calls RunChild — so the server has its own file
// descriptors, limited to nofile (soft and hard; 0 keeps the limit this
// process has). env is the server's whole environment beside PATH. The server
// gets SIGTERM when the test ends.
func StartProcess(t testing.TB, env map[string]string, nofile uint64, args ...string) *App {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("failed to find the test binary: %v", err)
	}
	cmd := exec.Command(self, append([]string{"-test.run=^$", "--", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), envChild + "=1"}
	if nofile > 0 {
		cmd.Env = append(cmd.Env, envChildNofile+"="+strconv.FormatUint(nofile, 10))
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	a := &App{out: &logBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = a.out, a.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("failed to start the server process: %v", err)
	}
	go func() { a.done <- cmd.Wait() }()
	a.cancel = func() { _ = cmd.Process.Signal(syscall.SIGTERM) }
	a.kill = func() { _ = cmd.Process.Kill() }
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			_ = cmd.Process.Kill()
			t.Errorf("server process stopped with an error: %v\n%s", err, a.Logs())
		}
	})
	a.waitListening(t, 20*time.Second)
	return a
}

// listening finds the listening line in the text or JSON log format.
var listening = regexp.MustCompile(`msg"?[=:]"?ratescope listening"?[ ,]"?addr"?[=:]"?([^\s"]+)`)
