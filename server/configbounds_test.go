package server_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/server"
)

// Log lines of a reload.
const (
	reloadOK      = `msg="config reloaded"`
	reloadRefused = `msg="config reload refused; the running config stays"`
)

// waitForLine waits until the server has logged line more than n times.
func waitForLine(t testing.TB, app *apptest.App, within time.Duration, line string, n int) {
	t.Helper()
	waitFor(t, within, fmt.Sprintf("log line %d of %s", n+1, line), func() bool { return strings.Count(app.Logs(), line) > n })
}

// totalAlloc is how many bytes this process has allocated so far — the
// server's and the test's: ceilings on it must be generous.
func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// envoyAliasBomb is an envoy file of levels levels of ten aliases each to
// the level below: 10^levels descriptors once its aliases are followed.
func envoyAliasBomb(levels int) string {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - &l0 {key: a}\n")
	for l := 1; l <= levels; l++ {
		fmt.Fprintf(&b, "  - &l%d {key: a, descriptors: [%s]}\n", l, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d,", l-1), 10), ","))
	}
	return b.String()
}

// startErr runs the server with args until it returns, failing the test if
// it is still starting after 20 s; release then unblocks whatever it waits
// on (a named pipe's reader, without the fix).
func startErr(t *testing.T, release func(), args ...string) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	argv := append([]string{"ratescope", "--addr", "127.0.0.1:0"}, args...)
	go func() { done <- server.Run(ctx, argv, func(string) string { return "" }, io.Discard) }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		if release != nil {
			release()
		}
		t.Fatalf("%v: still starting after 20 s", args)
		return nil
	}
}

// TestEnvoyDirRefusesAliasBomb: a file of nested aliases dropped into the
// folder is refused before any alias is followed — logged with its name,
// counted, the running set kept — and the next good edit applies; the same
// file stops start-up at once, naming it. Followed, six levels cost ~800 MB
// (seven, the 554-byte shape of the 674-byte file that grew a process past
// 6 GB, ten times that), so seven are tried only once six proved cheap.
func TestEnvoyDirRefusesAliasBomb(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte(envoyShopV1), 0o644); err != nil {
		t.Fatal(err)
	}
	app := startApp(t, nil, "--envoy-config-dir", dir)
	v1 := version(t, app)
	bomb := filepath.Join(dir, "bomb.yaml")
	const ceiling = 128 << 20
	for i, levels := range []int{6, 7} {
		before := totalAlloc()
		replaceFile(t, bomb, envoyAliasBomb(levels))
		waitForLine(t, app, 60*time.Second, reloadRefused, i)
		if used := totalAlloc() - before; used > ceiling {
			t.Fatalf("%d levels: the process allocated %d MB refusing it, more than %d MB", levels, used>>20, ceiling>>20)
		}
	}
	if logs := app.Logs(); !strings.Contains(logs, "bomb.yaml: failed to read the YAML: document contains excessive aliasing") {
		t.Fatalf("no log line names the file and what is wrong:\n%s", grepLines(logs, "reload"))
	}
	if !strings.Contains(metrics(t, app), `ratescope_config_reloads_total{result="error"} 2`) {
		t.Fatal("the refusals were not counted")
	}
	if v := version(t, app); v != v1 {
		t.Fatalf("version %s after a refused file, want %s", v, v1)
	}

	// A good edit applies.
	replaceFile(t, bomb, "domain: bomb\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 3}}\n")
	waitForLine(t, app, 10*time.Second, reloadOK, 0)
	if names := policyNames(t, app.URL); !slices.Contains(names, "bomb.a") {
		t.Fatalf("policies %v after the good edit", names)
	}

	// At start-up.
	startDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(startDir, "bomb.yaml"), []byte(envoyAliasBomb(7)), 0o644); err != nil {
		t.Fatal(err)
	}
	err := startErr(t, nil, "--envoy-config-dir", startDir)
	if err == nil || !strings.Contains(err.Error(), "bomb.yaml: failed to read the YAML: document contains excessive aliasing") {
		t.Fatalf("start-up: %v", err)
	}
}

// TestConfigFilesMustBeRegular: a named pipe or a link to /dev/zero in the
// envoy folder, or in place of the config file, is refused at once with a
// log line naming it — never a reload that waits on the pipe or reads
// forever, leaving every later edit unapplied — and the next good edit
// applies. At start-up the same files stop the server with a message naming
// them. Each case runs only while those before it held: a reader that waits
// on a pipe would read /dev/zero until memory runs out.
func TestConfigFilesMustBeRegular(t *testing.T) {
	strange := []struct {
		name, says string
		make       func(path string) error
	}{
		{"pipe.yaml", "not a regular file (a named pipe)", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"zero.yaml", "not a regular file (a character device)", func(p string) error { return os.Symlink("/dev/zero", p) }},
	}
	dir := t.TempDir()
	shop := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(shop, []byte(envoyShopV1), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgDir := t.TempDir()
	cfg := filepath.Join(cfgDir, "ratescope.yaml")
	if err := os.WriteFile(cfg, []byte(reloadV1), 0o644); err != nil {
		t.Fatal(err)
	}
	app := startApp(t, nil, "--envoy-config-dir", dir, "--config", cfg)
	refused := 0
	for i, s := range strange {
		if t.Failed() {
			t.Fatalf("%s not tried: the cases before it failed", s.name)
		}
		// In the envoy folder, beside a good file.
		path := filepath.Join(dir, s.name)
		if err := s.make(path); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unblockPipe(path) })
		waitForLine(t, app, 10*time.Second, reloadRefused, refused)
		refused++
		if logs := app.Logs(); !strings.Contains(logs, "failed to read "+path+": "+s.says) {
			t.Fatalf("no log line names %s and what it is:\n%s", s.name, grepLines(logs, "reload"))
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		replaceFile(t, shop, strings.Replace(envoyShopV1, "requests_per_unit: 2", fmt.Sprintf("requests_per_unit: %d", 3+i), 1))
		waitForLine(t, app, 10*time.Second, reloadOK, 2*i)

		// In place of the config file (an editor's rename over it).
		tmp := filepath.Join(cfgDir, ".swap")
		if err := s.make(tmp); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unblockPipe(cfg) })
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
		waitForLine(t, app, 10*time.Second, reloadRefused, refused)
		refused++
		if logs := app.Logs(); !strings.Contains(logs, "failed to read the config file "+cfg+": "+s.says) {
			t.Fatalf("no log line names the config file and what it is:\n%s", grepLines(logs, "reload"))
		}
		replaceFile(t, cfg, strings.Replace(reloadV1, `["3/1m"]`, fmt.Sprintf(`["%d/1m"]`, 6+i), 1))
		waitForLine(t, app, 10*time.Second, reloadOK, 2*i+1)
	}
	if !strings.Contains(metrics(t, app), fmt.Sprintf(`ratescope_config_reloads_total{result="error"} %d`, refused)) {
		t.Fatal("the refusals were not counted")
	}
	if got := policyLimits(t, app); got["shop.cart"] != 4 || got["login"] != 7 {
		t.Fatalf("limits %v after the last good edits", got)
	}

	// At start-up: the server stops at once, naming the file.
	for _, s := range strange {
		if t.Failed() {
			t.Fatalf("%s not tried at start-up: the cases before it failed", s.name)
		}
		envoyDir := t.TempDir()
		path := filepath.Join(envoyDir, s.name)
		if err := s.make(path); err != nil {
			t.Fatal(err)
		}
		err := startErr(t, func() { unblockPipe(path) }, "--envoy-config-dir", envoyDir)
		if err == nil || !strings.Contains(err.Error(), "failed to read "+path+": "+s.says) {
			t.Fatalf("start-up with %s in the envoy folder: %v", s.name, err)
		}
		path = filepath.Join(t.TempDir(), s.name)
		if err := s.make(path); err != nil {
			t.Fatal(err)
		}
		err = startErr(t, func() { unblockPipe(path) }, "--config", path)
		if err == nil || !strings.Contains(err.Error(), "failed to read the config file "+path+": "+s.says) {
			t.Fatalf("start-up with --config %s: %v", s.name, err)
		}
	}
}

// unblockPipe opens a named pipe for writing without blocking and closes
// it: a reader waiting in open(2) goes on and reads its end.
func unblockPipe(path string) {
	if fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		syscall.Close(fd)
	}
}
