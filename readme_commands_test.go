package main

// The README's Go middleware and its shell commands run as printed.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

// buildReadmeSnippet builds the README's Go snippet that holds marker, with
// ":8081" replaced by addr, and returns the binary's path.
func buildReadmeSnippet(t *testing.T, marker, addr string) string {
	t.Helper()
	var src string
	for _, m := range goSnippets.FindAllStringSubmatch(read(t, "README.md"), -1) {
		if strings.Contains(m[1], marker) {
			src = m[1]
		}
	}
	if !strings.Contains(src, `":8081"`) {
		t.Fatalf("the README has no Go snippet holding %q that listens on \":8081\"", marker)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "snippet.go")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(src, `":8081"`, `"`+addr+`"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	ov, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(wd, "internal/docsnippets/readme/snippet.go"): file}})
	ovPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "service")
	if out, err := exec.Command("go", "build", "-overlay", ovPath, "-o", bin, "./internal/docsnippets/readme").CombinedOutput(); err != nil {
		t.Fatalf("failed to build the README's Go snippet: %v\n%s", err, out)
	}
	return bin
}

// service runs the built snippet with REDIS_URL (unset when empty) until the
// test ends; its log goes to the returned buffer.
func service(t *testing.T, bin, redisURL string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if redisURL != "" {
		cmd.Env = append(cmd.Env, "REDIS_URL="+redisURL)
	}
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, log
}

// TestReadmeGoMiddlewareRuns runs "Link it into a Go service" as printed
// (but for its port): on a Redis from REDIS_URL, five logins get 200 with
// the RateLimit headers and the sixth 429; with Redis gone it answers 503
// and logs why; without REDIS_URL it stops at once, saying what it needs.
func TestReadmeGoMiddlewareRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the snippet with go build")
	}
	rdb := redistest.Start(t)
	addr := freeAddr(t)
	bin := buildReadmeSnippet(t, "mw.Limit(login)(http.HandlerFunc", addr)

	_, log := service(t, bin, rdb.URL)
	post := func() (*http.Response, string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := http.Post("http://"+addr+"/login", "text/plain", nil)
			if err == nil {
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, string(b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the service does not answer: %v\n%s", err, log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := 1; i <= 5; i++ {
		resp, body := post()
		if resp.StatusCode != 200 || body != "welcome\n" || !strings.HasPrefix(resp.Header.Get("RateLimit"), fmt.Sprintf(`"login/60";r=%d;`, 5-i)) {
			t.Fatalf("login %d: %d %v %q\n%s", i, resp.StatusCode, resp.Header, body, log)
		}
	}
	if resp, body := post(); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("login 6: %d %v %q", resp.StatusCode, resp.Header, body)
	}

	rdb.Stop()
	resp, body := post()
	if resp.StatusCode != 503 {
		t.Fatalf("with Redis gone: %d %q, want 503", resp.StatusCode, body)
	}
	if !eventually(func() bool { return strings.Contains(log.String(), "rate limit login: no decision after") }) {
		t.Errorf("the 503 left no line in the service's log saying why:\n%s", log)
	}

	cmd, log := service(t, bin, "")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(log.String(), "set REDIS_URL to your Redis") {
			t.Errorf("without REDIS_URL: exit %v, log %q; want a failure naming REDIS_URL", err, log)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("without REDIS_URL the service kept running:\n%s", log)
	}
}

// TestReadmeShellCommands runs the README's ```sh commands that can run on
// this machine, and names the ones it leaves out and why; a command it does
// not know fails, so a new one is never left untried unnoticed.
func TestReadmeShellCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("installs ratescope with go install")
	}
	gobin := t.TempDir()
	skipped := map[string]string{
		"go run .":               "the demo: a server until stopped; TestConsoleSnippetsRun runs the same server",
		"go test ./...":          "every test, this one among them",
		"go tool templ generate": "rewrites views/*_templ.go in the tree",
		"bash .ci/run":           "installs packages and runs every test",
	}
	ran := 0
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(read(t, "README.md"), -1) {
		for _, line := range strings.Split(strings.TrimSpace(block[1]), "\n") {
			cmd := strings.TrimSpace(strings.SplitN(line, "#", 2)[0])
			switch {
			case skipped[cmd] != "":
				t.Logf("not run: `%s`: %s", cmd, skipped[cmd])
			case cmd == "go install .":
				c := exec.Command("go", "install", ".")
				c.Env = append(os.Environ(), "GOBIN="+gobin)
				if out, err := c.CombinedOutput(); err != nil {
					t.Fatalf("`go install .`: %v\n%s", err, out)
				}
				ran++
			case cmd == "REDIS_URL=redis://localhost:6379/0 ratescope":
				// Installed by `go install .` above, on a redis-server of the
				// test's own and a free port instead of 6379 and 8080.
				c := exec.Command(filepath.Join(gobin, "ratescope"))
				c.Env = []string{"PATH=" + os.Getenv("PATH"), "REDIS_URL=" + redistest.Start(t).URL, "RATESCOPE_ADDR=" + freeAddr(t)}
				log := &syncBuffer{}
				c.Stdout, c.Stderr = log, log
				if err := c.Start(); err != nil {
					t.Fatalf("`%s`: %v (did `go install .` come first?)", cmd, err)
				}
				ok := eventually(func() bool { return strings.Contains(log.String(), "ratescope listening") })
				_ = c.Process.Kill()
				_ = c.Wait()
				if !ok || strings.Contains(log.String(), "embedded") {
					t.Fatalf("`%s` did not start on the Redis it was given:\n%s", cmd, log)
				}
				ran++
			default:
				t.Errorf("the README's ```sh command `%s` is neither run nor listed as left out with a reason", cmd)
			}
		}
	}
	if ran != 2 {
		t.Errorf("ran %d README commands, want 2 (go install ., then ratescope)", ran)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// eventually polls cond for up to 20 s: generous, on a loaded machine.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// syncBuffer is a process's output, read while it is written.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
