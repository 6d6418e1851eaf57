// Package proxytest starts real reverse proxies for tests — Debian's caddy
// (forward_auth) and nginx (auth_request) — in front of a backend, asking
// ratescope's forward auth whether each request may pass, with the configs
// printed in docs/proxies.md. Each runs on a free port in its own temporary
// folder and stops when the test ends.
//
// When a proxy is not installed the test is skipped with a message naming it,
// or fails under RATESCOPE_TEST_STRICT=1 (as in CI), like redistest.Need.
package proxytest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

const startTimeout = 15 * time.Second

// Proxy is one proxy process owned by a test.
type Proxy struct {
	URL string // http://127.0.0.1:port
	dir string
	log string // the proxy's own output

	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
}

// Logs returns what the proxy wrote so far, for failure messages.
func (p *Proxy) Logs() string {
	b, _ := os.ReadFile(p.log)
	out := string(b)
	if extra, err := os.ReadFile(filepath.Join(p.dir, "error.log")); err == nil {
		out += string(extra)
	}
	return out
}

// Need skips the test, or fails it under RATESCOPE_TEST_STRICT=1, when program
// is not installed, and returns its path. Debian puts nginx in /usr/sbin,
// which is not on every user's PATH.
func Need(t testing.TB, program string) string {
	t.Helper()
	if path, err := exec.LookPath(program); err == nil {
		return path
	}
	if path := filepath.Join("/usr/sbin", program); isExecutable(path) {
		return path
	}
	msg := fmt.Sprintf("%s not found on PATH (install it, e.g. apt-get install -y caddy nginx)", program)
	if redistest.Strict() {
		t.Fatalf("%s; %s=1 makes this a failure", msg, redistest.EnvStrict)
	}
	t.Skip(msg)
	return ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// The configs come from docs/proxies.md, as printed: the fenced block of
// each proxy's language, with only these placeholders replaced by the test's
// own addresses (each must appear, so a docs edit that drops one fails
// loudly instead of testing something else). The printed configs run on one
// machine: ratescope on :8080, the app on :3000, the proxy on :8081.
const (
	docsPage = "docs/proxies.md"

	placeholderAuth    = "localhost:8080" // ratescope's address
	placeholderBackend = "localhost:3000" // the app's
	placeholderSite    = ":8081 {"        // Caddy's site address: the test's port
	placeholderListen  = "listen 8081;"   // nginx's listen directive: the test's port
)

// docsBlock returns the one fenced block of the given language (its info
// string, e.g. "caddyfile" or "nginx") in docs/proxies.md.
func docsBlock(t testing.TB, lang string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), docsPage))
	if err != nil {
		t.Fatalf("failed to read the proxy configs: %v", err)
	}
	blocks := regexp.MustCompile("(?ms)^```"+regexp.QuoteMeta(lang)+"\n(.*?)^```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) != 1 {
		t.Fatalf("%s has %d ```%s blocks, want one", docsPage, len(blocks), lang)
	}
	return blocks[0][1]
}

// fill replaces each placeholder of block with its value, in the order
// given (the site's first, so no replaced address can be taken for it).
func fill(t testing.TB, lang, block string, values [][2]string) string {
	t.Helper()
	for _, pv := range values {
		if !strings.Contains(block, pv[0]) {
			t.Fatalf("the %s config in %s no longer holds %q, which the tests replace", lang, docsPage, pv[0])
		}
		block = strings.ReplaceAll(block, pv[0], pv[1])
	}
	return block
}

// moduleRoot is the folder of go.mod, above the test's package folder.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("failed to find go.mod above the test's folder")
		}
		dir = parent
	}
}

// Caddy starts caddy with the Caddyfile of docs/proxies.md, asking ratescope
// at auth (host:port) in front of backend (host:port) on a catch-all site of
// its own port, so any Host reaches it. The test adds only Caddy's global
// options: no admin endpoint, no automatic HTTPS, storage and binding inside
// the test.
func Caddy(t testing.TB, auth, backend string) *Proxy {
	t.Helper()
	bin := Need(t, "caddy")
	block := docsBlock(t, "caddyfile")
	return start(t, "Caddyfile", func(dir string, port int) string {
		return fmt.Sprintf("{\n\tadmin off\n\tauto_https off\n\tstorage file_system %s/data\n\tdefault_bind 127.0.0.1\n}\n\n", dir) +
			fill(t, "caddyfile", block, [][2]string{
				{placeholderSite, fmt.Sprintf("http://:%d {", port)}, {placeholderAuth, auth}, {placeholderBackend, backend},
			})
	}, func(dir, conf string) *exec.Cmd {
		cmd := exec.Command(bin, "run", "--config", conf, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		return cmd
	})
}

// Nginx starts nginx with the server block of docs/proxies.md, asking
// ratescope at auth (host:port) in front of backend (host:port). The test
// wraps it in a main config of its own: no daemon, pid, logs and temp files
// inside the test's folder.
func Nginx(t testing.TB, auth, backend string) *Proxy {
	t.Helper()
	bin := Need(t, "nginx")
	block := docsBlock(t, "nginx")
	return start(t, "nginx.conf", func(dir string, port int) string {
		server := fill(t, "nginx", block, [][2]string{
			{placeholderListen, fmt.Sprintf("listen 127.0.0.1:%d;", port)}, {placeholderAuth, auth}, {placeholderBackend, backend},
		})
		return fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path %[1]s/client_body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
%[2]s}
`, dir, server)
	}, func(dir, conf string) *exec.Cmd {
		return exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	})
}

// start writes the configuration on a free port and runs the proxy until it
// answers there, trying other ports when one was taken meanwhile.
func start(t testing.TB, name string, config func(dir string, port int) string, command func(dir, conf string) *exec.Cmd) *Proxy {
	t.Helper()
	var lastErr error
	for range 5 {
		dir := t.TempDir()
		port := freePort(t)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(config(dir, port)), 0o644); err != nil {
			t.Fatal(err)
		}
		p := &Proxy{URL: "http://127.0.0.1:" + strconv.Itoa(port), dir: dir, log: filepath.Join(dir, "proxy.log")}
		if lastErr = p.launch(command(dir, path), port); lastErr == nil {
			t.Cleanup(p.stop)
			return p
		}
	}
	t.Fatalf("failed to start %s: %v", name, lastErr)
	return nil
}

func (p *Proxy) launch(cmd *exec.Cmd, port int) error {
	log, err := os.Create(p.log)
	if err != nil {
		return err
	}
	defer log.Close()
	// Never inherit the test's stdout: a background process holding it keeps
	// `go test` output pipes open.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, log, log
	cmd.Dir = p.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.exited) }()
	addr := strings.TrimPrefix(p.URL, "http://")
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			p.cmd = nil
			return fmt.Errorf("it exited: %s", lastLines(p.Logs(), 8))
		default:
		}
		if listening(addr) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.stop()
	return fmt.Errorf("it did not answer on port %d within %s: %s", port, startTimeout, lastLines(p.Logs(), 8))
}

// listening reports whether the proxy accepts connections. It sends no
// request: one would go through forward auth and count in a window.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (p *Proxy) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
