package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// Addresses of the connection tests: every 127/8 address reaches the loopback
// interface, so one machine can play several clients.
const (
	flooder   = "127.0.0.2"
	bystander = "127.0.0.3"
)

// TestIdleFloodLeavesOthersAnswered: one address opens 3,000 keep-alive
// connections and leaves them idle, against a server whose process may hold
// 1,024 files. It keeps the default cap of 256; the rest are closed as soon as
// they are accepted, and 50 checks from another address are each answered
// within 1 s, while the flooder keeps reconnecting. Without the cap the same
// flood takes every descriptor and the checks go unanswered: the second case
// shows the test sees the difference.
func TestIdleFloodLeavesOthersAnswered(t *testing.T) {
	const (
		floodSize = 3000
		nofile    = 1024 // fewer than the flood, far more than the cap
		checks    = 50
		answerIn  = time.Second
	)
	url := redistest.RealURL(t)
	for _, tc := range []struct {
		name   string
		args   []string
		capped bool
	}{
		{"capped", nil, true},
		{"uncapped", []string{"--max-conns-per-client", "0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := apptest.StartProcess(t, map[string]string{"REDIS_URL": url}, nofile, tc.args...)
			if !regexp.MustCompile(`open files limit.*soft=1024 hard=1024`).MatchString(app.Logs()) {
				t.Fatalf("no log line of the open-files limit:\n%s", app.Logs())
			}
			f := flood(t, app.Addr, flooder, floodSize, 3*time.Second)
			t.Logf("flood: %d served and kept, %d closed unanswered, %d stuck, in %v", f.served, f.closed, f.stuck, f.took)

			stop := make(chan struct{})
			var redials sync.WaitGroup
			if tc.capped {
				if f.served != 256 || f.closed != floodSize-256 {
					t.Fatalf("the flooder kept %d connections and lost %d, want 256 and %d", f.served, f.closed, floodSize-256)
				}
				if n := refusedConns(t, app); n != floodSize-256 {
					t.Fatalf("ratescope_conns_refused_total = %d, want %d", n, floodSize-256)
				}
				// The flooder keeps knocking while the checks run.
				for range 4 {
					redials.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
							}
							if c, _ := keepAliveConn(app.Addr, flooder, 5*time.Second); c != nil {
								c.Close()
							}
						}
					})
				}
			}
			slow := 0
			var worst time.Duration
			for i := range checks {
				took, err := checkFrom(app.Addr, bystander, answerIn, fmt.Sprintf("bystander-%d", i))
				worst = max(worst, took)
				if err != nil || took > answerIn {
					slow++
					if tc.capped {
						t.Errorf("check %d from %s: %v after %v", i, bystander, err, took)
					} else if slow == 5 {
						break // enough to show the flood starves them
					}
				}
			}
			close(stop)
			redials.Wait()
			t.Logf("%d of %d checks not answered within %v; slowest %v", slow, checks, answerIn, worst)
			if !tc.capped && slow == 0 {
				t.Fatal("without the cap every check was answered: the flood did not exhaust the server's descriptors, so the capped case proves nothing")
			}
		})
	}
}

// TestConnCapExemptsTrustedProxies: trusted proxies, as the config in force
// names them, hold any number of connections; other addresses hold the cap.
func TestConnCapExemptsTrustedProxies(t *testing.T) {
	const proxy, client = "127.0.0.4", "127.0.0.5"
	path := writeConfig(t, `trustedProxies: ["`+proxy+`"]`+"\n")
	app := startApp(t, nil, "--config", path, "--max-conns-per-client", "3")
	if f := flood(t, app.Addr, proxy, 8, 5*time.Second); f.served != 8 {
		t.Fatalf("the trusted proxy kept %d of 8 connections", f.served)
	}
	if f := flood(t, app.Addr, client, 8, 5*time.Second); f.served != 3 || f.closed != 5 {
		t.Fatalf("a client kept %d of 8 connections and lost %d, want 3 and 5", f.served, f.closed)
	}

	// The proxy's role moves to the other address: the cap follows the config.
	v := version(t, app)
	replaceFile(t, path, `trustedProxies: ["`+client+`"]`+"\n")
	waitFor(t, 5*time.Second, "the new trusted proxy applied", func() bool { return version(t, app) != v })
	if f := flood(t, app.Addr, client, 8, 5*time.Second); f.served != 8 {
		t.Fatalf("the new trusted proxy kept %d of 8 more connections", f.served)
	}
	if f := flood(t, app.Addr, proxy, 8, 5*time.Second); f.served != 3 {
		t.Fatalf("the former proxy kept %d of 8 new connections, want 3", f.served)
	}
	if n := refusedConns(t, app); n != 5+5 {
		t.Fatalf("ratescope_conns_refused_total = %d, want 10", n)
	}
}

// floodResult counts a flood's connections: served (answered), closed by the
// server without an answer, or stuck (no answer within the wait). Served and
// stuck ones stay open, idle, until the test ends.
type floodResult struct {
	served, closed, stuck int
	took                  time.Duration
}

// flood opens n connections from the local address from to addr at once, as
// fast as the machine goes, each with one request answered within wait or
// not at all.
func flood(t *testing.T, addr, from string, n int, wait time.Duration) floodResult {
	t.Helper()
	var served, closed, stuck atomic.Int64
	var mu sync.Mutex
	var kept []net.Conn
	var failed []error
	t.Cleanup(func() {
		for _, c := range kept {
			c.Close()
		}
	})
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, err := keepAliveConn(addr, from, wait)
			switch {
			case err == nil:
				served.Add(1)
			case errors.Is(err, errUnanswered):
				closed.Add(1)
			case errors.Is(err, errStuck):
				stuck.Add(1)
			}
			mu.Lock()
			defer mu.Unlock()
			if c != nil {
				kept = append(kept, c)
			}
			if err != nil && !errors.Is(err, errUnanswered) && !errors.Is(err, errStuck) {
				failed = append(failed, err)
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("flood from %s: %d connections failed, e.g. %v", from, len(failed), failed[0])
	}
	return floodResult{int(served.Load()), int(closed.Load()), int(stuck.Load()), time.Since(start)}
}

var (
	errUnanswered = errors.New("closed by the server without an answer")
	errStuck      = errors.New("no answer in time")
)

// keepAliveConn connects from the local address from to addr and sends one
// request. It returns the connection, kept alive and idle, once the request is
// answered, or still waiting (errStuck) when wait passes first.
func keepAliveConn(addr, from string, wait time.Duration) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 30 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("failed to connect: %w", err)
	}
	_ = c.SetDeadline(time.Now().Add(wait))
	_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: ratescope\r\n\r\n")
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			_ = c.SetDeadline(time.Time{})
			return c, errStuck
		}
		c.Close()
		return nil, errUnanswered // EOF or a reset: closed at once
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetDeadline(time.Time{})
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("/healthz answered %s", resp.Status)
	}
	return c, nil
}

// checkFrom sends one check from the local address from, on a connection of
// its own, and says how long the answer took.
func checkFrom(addr, from string, wait time.Duration, key string) (time.Duration, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	client := &http.Client{Timeout: wait, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			return d.DialContext(ctx, network, a)
		},
		DisableKeepAlives: true,
	}}
	start := time.Now()
	resp, err := client.Post("http://"+addr+"/api/v1/check?policy=default&key="+key, "", nil)
	if err != nil {
		return time.Since(start), err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return took, fmt.Errorf("check answered %s", resp.Status)
	}
	return took, nil
}

// refusedConns reads ratescope_conns_refused_total.
func refusedConns(t *testing.T, app *apptest.App) int {
	t.Helper()
	for line := range strings.SplitSeq(metrics(t, app), "\n") {
		if v, ok := strings.CutPrefix(line, "ratescope_conns_refused_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("ratescope_conns_refused_total: %v", err)
			}
			return int(n)
		}
	}
	t.Fatal("/metrics has no ratescope_conns_refused_total")
	return 0
}

// TestEmbeddedRedisNamedFirst: the demo (no Redis URL) says in its first log
// line that it runs on the embedded Redis, as the README tells a newcomer.
func TestEmbeddedRedisNamedFirst(t *testing.T) {
	app := apptest.StartProcess(t, nil, 0)
	first, _, _ := strings.Cut(app.Logs(), "\n")
	if !strings.Contains(first, "embedded in-process Redis") {
		t.Fatalf("the first log line does not name the embedded Redis: %s\n%s", first, app.Logs())
	}
}
