// Package apptest runs the whole server in the test process, the way main
// does, on a free port: server.Run with arguments, an environment of the
// test's choosing and stdout captured.
package apptest

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/server"
)

// App is one running server.
type App struct {
	URL  string // http://127.0.0.1:port
	Addr string // 127.0.0.1:port
	// GRPCAddr is where the Envoy rate limit service listens (host:port), when
	// the server was started with --grpc-addr (e.g. 127.0.0.1:0); else empty.
	GRPCAddr string

	out    *logBuffer
	cancel context.CancelFunc
	kill   func() // for a server in a process of its own (StartProcess)
	done   chan error
}

// Start runs server.Run with args (flags, without the program name) and env,
// waits until /healthz answers, and stops the server when the test ends.
func Start(t testing.TB, env map[string]string, args ...string) *App {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &App{out: &logBuffer{}, cancel: cancel, done: make(chan error, 1)}
	getenv := func(k string) string { return env[k] }
	argv := append([]string{"ratescope", "--addr", "127.0.0.1:0"}, args...)
	go func() { a.done <- server.Run(ctx, argv, getenv, a.out) }()
	a.waitListening(t, 20*time.Second)
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Errorf("server stopped with an error: %v", err)
		}
	})
	return a
}

// waitListening waits until the server has logged its address and /healthz
// answers, and fails the test when it stops or within has passed first.
func (a *App) waitListening(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for a.Addr == "" {
		select {
		case err := <-a.done:
			t.Fatalf("server stopped during start-up: %v\n%s", err, a.out.String())
		default:
		}
		if m := listening.FindStringSubmatch(a.out.String()); m != nil {
			a.Addr = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start:\n%s", a.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.URL = "http://" + a.Addr
	for {
		resp, err := http.Get(a.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz did not answer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Logged before either server starts serving, so it is there by now.
	if m := envoyListening.FindStringSubmatch(a.out.String()); m != nil {
		a.GRPCAddr = m[1]
	}
}

// envoyListening finds the gRPC listener's address in the text or JSON log.
var envoyListening = regexp.MustCompile(`msg"?[=:]"?envoy rate limit service listening"?[ ,]"?addr"?[=:]"?([^\s"]+)`)

// Stop cancels the server's context and waits for Run to return.
func (a *App) Stop() error {
	if a.cancel == nil {
		return nil
	}
	a.cancel()
	a.cancel = nil
	select {
	case err := <-a.done:
		return err
	case <-time.After(15 * time.Second):
		return context.DeadlineExceeded
	}
}

// Kill ends a server started by StartProcess at once, as a crash would: no
// shutdown, no goodbye to other instances. It waits for the process to end.
func (a *App) Kill() {
	if a.kill == nil {
		panic("apptest: Kill needs a server in a process of its own (StartProcess)")
	}
	a.kill()
	a.cancel = nil
	<-a.done
}

// Logs returns what the server has written to stdout so far.
func (a *App) Logs() string { return a.out.String() }

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
