// Package proxytest starts real reverse proxies for tests — Debian's caddy
// (forward_auth) and nginx (auth_request) — in front of a backend, asking
// ratescope's forward auth whether each request may pass. Each runs on a
// free port in its own temporary folder and stops when the test ends.
//
// When a proxy is not installed the test is skipped with a message naming it,
// or fails under RATESCOPE_TEST_STRICT=1 (as in CI), like redistest.Need.
package proxytest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
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

// config is what a proxy's configuration template needs.
type config struct {
	Dir     string
	Port    int
	Auth    string // host:port of ratescope
	Backend string // host:port of the backend
}

// caddyfile puts Caddy in front of the backend. Requests from 127.0.0.1 are
// from a trusted load balancer (the test client plays it), so Caddy appends
// to their X-Forwarded-For instead of replacing it (trusted_proxies).
var caddyfile = template.Must(template.New("Caddyfile").Parse(`{
	admin off
	auto_https off
	storage file_system {{.Dir}}/data
}

http://127.0.0.1:{{.Port}} {
	bind 127.0.0.1
	forward_auth {{.Auth}} {
		uri /forward-auth
		copy_headers RateLimit RateLimit-Policy
		trusted_proxies 127.0.0.1/32
	}
	reverse_proxy {{.Backend}}
}
`))

// Caddy starts caddy with forward_auth to ratescope at auth (host:port) in
// front of backend (host:port). A denial reaches the client as ratescope
// answered it: 429, Retry-After, the RateLimit fields, the problem document.
func Caddy(t testing.TB, auth, backend string) *Proxy {
	t.Helper()
	bin := Need(t, "caddy")
	return start(t, caddyfile, "Caddyfile", auth, backend, func(dir, conf string) *exec.Cmd {
		cmd := exec.Command(bin, "run", "--config", conf, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		return cmd
	})
}

// nginxConf puts nginx in front of the backend. auth_request passes only 2xx,
// 401 and 403 on (anything else becomes 500), so the routes deny with 403 and
// error_page maps it to 429 with the Retry-After and RateLimit fields
// ratescope sent (auth_request_set).
var nginxConf = template.Must(template.New("nginx.conf").Parse(`daemon off;
master_process off;
worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path {{.Dir}}/client_body;
	proxy_temp_path {{.Dir}}/proxy;
	fastcgi_temp_path {{.Dir}}/fastcgi;
	uwsgi_temp_path {{.Dir}}/uwsgi;
	scgi_temp_path {{.Dir}}/scgi;
	server {
		listen 127.0.0.1:{{.Port}};
		location / {
			auth_request /_ratescope;
			auth_request_set $ratescope_retry_after $upstream_http_retry_after;
			auth_request_set $ratescope_ratelimit $upstream_http_ratelimit;
			auth_request_set $ratescope_policy $upstream_http_ratelimit_policy;
			error_page 403 = @ratelimited;
			add_header RateLimit $ratescope_ratelimit;
			add_header RateLimit-Policy $ratescope_policy;
			proxy_pass http://{{.Backend}};
		}
		location = /_ratescope {
			internal;
			proxy_pass http://{{.Auth}}/forward-auth;
			proxy_pass_request_body off;
			proxy_set_header Content-Length "";
			proxy_set_header X-Forwarded-Method $request_method;
			proxy_set_header X-Forwarded-Host $host;
			proxy_set_header X-Forwarded-Uri $request_uri;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
		}
		location @ratelimited {
			add_header Retry-After $ratescope_retry_after always;
			add_header RateLimit $ratescope_ratelimit always;
			add_header RateLimit-Policy $ratescope_policy always;
			default_type application/problem+json;
			return 429 '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429}';
		}
	}
}
`))

// Nginx starts nginx with auth_request to ratescope at auth (host:port) in
// front of backend (host:port). Routes for it deny with 403, which the client
// sees as 429 with Retry-After.
func Nginx(t testing.TB, auth, backend string) *Proxy {
	t.Helper()
	bin := Need(t, "nginx")
	return start(t, nginxConf, "nginx.conf", auth, backend, func(dir, conf string) *exec.Cmd {
		return exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	})
}

// start writes the configuration on a free port and runs the proxy until it
// answers there, trying other ports when one was taken meanwhile.
func start(t testing.TB, tmpl *template.Template, name, auth, backend string, command func(dir, conf string) *exec.Cmd) *Proxy {
	t.Helper()
	var lastErr error
	for range 5 {
		dir := t.TempDir()
		var conf bytes.Buffer
		c := config{Dir: dir, Port: freePort(t), Auth: auth, Backend: backend}
		if err := tmpl.Execute(&conf, c); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, conf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		p := &Proxy{URL: "http://127.0.0.1:" + strconv.Itoa(c.Port), dir: dir, log: filepath.Join(dir, "proxy.log")}
		if lastErr = p.launch(command(dir, path), c.Port); lastErr == nil {
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
