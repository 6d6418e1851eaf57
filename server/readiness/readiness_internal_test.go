package readiness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// TestMain says once what a missing redis-server cost (TestMonitor then
// runs on the embedded Redis).
func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }

// redisError is a Redis error reply as go-redis returns one.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

func TestWord(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{redisError("READONLY You can't write against a read only replica. script: 1a2b"), "readonly"},
		{fmt.Errorf("failed to check: %w", redisError("OOM command not allowed when used memory > 'maxmemory'.")), "oom"},
		{redisError("NOSCRIPT No matching script. Please use EVAL."), "noscript"},
		{redisError("MISCONF Redis is configured to save RDB snapshots"), "misconf"},
		{redisError("redis: nil"), "redis"},
		{redisError("UP?"), "error"}, // never mistaken for a Redis that is up
		{context.DeadlineExceeded, Down},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), Down},
		{redis.ErrClosed, Down},
	} {
		if got := Word(c.err); got != c.want {
			t.Errorf("Word(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestOutageLog: however many checks fail, an outage logs one line when it
// starts, a summary at most every SummaryInterval (with the count of failed
// checks), and one line when it ends with the total.
func TestOutageLog(t *testing.T) {
	var buf bytes.Buffer
	m := New(nil, slog.New(slog.NewTextHandler(&buf, nil)))
	var changes []string
	m.OnChange(func(s State) { changes = append(changes, s.Redis) })
	t0 := time.Now()
	down := errors.New("connection refused")
	m.set(nil, 0, t0)   // up and up: nothing
	for i := range 25 { // 25 s of outage, one probe a second, 300 failed checks each
		m.set(down, 300, t0.Add(time.Duration(i+1)*time.Second))
	}
	m.set(redisError("OOM command not allowed"), 300, t0.Add(26*time.Second))
	m.set(nil, 100, t0.Add(27*time.Second))
	m.set(nil, 0, t0.Add(28*time.Second))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var msgs []string
	for _, l := range lines {
		_, rest, _ := strings.Cut(l, "msg=\"")
		msg, _, _ := strings.Cut(rest, "\"")
		msgs = append(msgs, msg)
	}
	want := []string{"redis outage started", "redis outage continues", "redis outage continues", "redis outage ended"}
	if strings.Join(msgs, ",") != strings.Join(want, ",") {
		t.Fatalf("logged %q, want %q:\n%s", msgs, want, buf.String())
	}
	if !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "redis=down") {
		t.Errorf("start: %s", lines[0])
	}
	if !strings.Contains(lines[1], "failed_checks=3300") || !strings.Contains(lines[2], "failed_checks=6300") {
		t.Errorf("summaries: %s | %s", lines[1], lines[2])
	}
	if !strings.Contains(lines[3], "level=INFO") || !strings.Contains(lines[3], "failed_checks=7900") || !strings.Contains(lines[3], "duration=26s") {
		t.Errorf("end: %s", lines[3])
	}
	if strings.Join(changes, ",") != "down,oom,up" {
		t.Errorf("OnChange heard %q, want down, oom, up", changes)
	}
}

// TestMonitor: on a Redis that answers, the first probe finds it up; checks
// that all fail since the previous probe turn it off, named by their error;
// a probe that writes turns it on again. On any Redis, embedded included.
func TestMonitor(t *testing.T) {
	rdb := redis.NewClient(mustOptions(t, redistest.URL(t)))
	defer rdb.Close()
	m := New(rdb, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if s := m.Wait(wctx); !s.Ready() {
		t.Fatalf("first probe: %+v", s)
	}
	if n, err := rdb.Exists(ctx, probeKey).Result(); err != nil || n != 1 {
		t.Fatalf("the probe wrote nothing: %d %v", n, err)
	}
	var target httplimit.Target
	m.Finished(target, httplimit.Result{Err: context.Canceled}, 0) // the caller went away: not Redis's fault
	m.Finished(target, httplimit.Result{Err: redisError("OOM command not allowed")}, 0)
	waitState(t, m, "oom")
	waitState(t, m, Up) // no more failing checks, and the probe writes
}

func waitState(t *testing.T, m *Monitor, want string) {
	t.Helper()
	deadline := time.Now().Add(3 * ProbeInterval)
	for m.State().Redis != want {
		if time.Now().After(deadline) {
			t.Fatalf("state %q, want %q", m.State().Redis, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustOptions(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
