package redistest

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

// TestAnyRedisOrder: RATESCOPE_TEST_REDIS_URL first, then a redis-server on
// PATH, then the embedded Redis.
func TestAnyRedisOrder(t *testing.T) {
	ctx := context.Background()
	t.Run("given", func(t *testing.T) {
		t.Setenv(EnvURL, "redis://192.0.2.1:6379/0")
		url, kind, stop, err := AnyRedis(ctx, t.TempDir())
		if err != nil || kind != Given || url != "redis://192.0.2.1:6379/0" {
			t.Fatalf("%q %q %v", url, kind, err)
		}
		stop()
	})
	t.Run("real", func(t *testing.T) {
		Need(t, "redis-server")
		t.Setenv(EnvURL, "")
		url, kind, stop, err := AnyRedis(ctx, t.TempDir())
		if err != nil || kind != Real {
			t.Fatalf("%q %q %v", url, kind, err)
		}
		defer stop()
		if info := info(t, url); !strings.Contains(info, "redis_version:") || strings.Contains(info, "miniredis") {
			t.Fatalf("INFO of a real server: %.200s", info)
		}
	})
	t.Run("embedded", func(t *testing.T) {
		t.Setenv(EnvURL, "")
		t.Setenv("PATH", t.TempDir()) // no redis-server there
		url, kind, stop, err := AnyRedis(ctx, t.TempDir())
		if err != nil || kind != Embedded {
			t.Fatalf("%q %q %v", url, kind, err)
		}
		stop()
	})
}

func info(t *testing.T, url string) string {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	s, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestProcess: a redis-server answers after Launch, not while paused or
// stopped, and comes back empty on the same port after Restart.
func TestProcess(t *testing.T) {
	Need(t, "redis-server")
	ctx := context.Background()
	p, err := Launch(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if p.Pid() <= 0 || !(strings.Contains(p.Version(), "Redis server") || strings.Contains(p.Version(), "Valkey server")) {
		t.Fatalf("pid %d, version %q", p.Pid(), p.Version())
	}
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if Ping(p.Addr) == nil {
		t.Fatal("a paused server answered PING")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := Ping(p.Addr); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	p.Stop()
	if Ping(p.Addr) == nil || p.Pid() != 0 {
		t.Fatal("a stopped server answered PING")
	}
	p.Stop() // harmless
	if err := p.Pause(); err == nil {
		t.Fatal("paused a stopped server")
	}
	addr := p.Addr
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if p.Addr != addr {
		t.Fatalf("restarted on %s, was %s", p.Addr, addr)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after Restart: EXISTS k = %d, %v; want an empty server", n, err)
	}
}

// TestProxy: through a paused proxy nothing answers, on open connections or
// new ones; after Resume the held commands complete.
func TestProxy(t *testing.T) {
	p := StartProxy(t, URL(t))
	opt, err := redis.ParseURL(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries, opt.ContextTimeoutEnabled = -1, true
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p.Pause()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := c.Ping(short).Err(); err == nil {
		t.Fatal("PING answered through a paused proxy")
	}
	if Ping(p.Addr) == nil {
		t.Fatal("a new connection got an answer through a paused proxy")
	}
	held := make(chan error, 1)
	other := redis.NewClient(opt)
	defer other.Close()
	go func() { held <- other.Set(ctx, "k", "during", 0).Err() }()
	select {
	case err := <-held:
		t.Fatalf("a command completed while paused: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	p.Resume()
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("the held command: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held command did not complete after Resume")
	}
	if v, err := other.Get(ctx, "k").Result(); err != nil || v != "during" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
	p.Resume() // harmless
}

// TestSummary: one line per missing program, counting skipped tests and
// subtests, and the tests that ran on the embedded Redis instead (a test and
// its subtests once).
func TestSummary(t *testing.T) {
	a := &absence{skipped: map[string]map[string]bool{}, fallback: map[string]bool{}}
	if got := a.summary(); len(got) != 0 {
		t.Fatalf("nothing missing: %q", got)
	}
	a.embedded("TestA")
	a.embedded("TestA/sub")
	a.embedded("TestB")
	if got := a.summary(); !slices.Equal(got, []string{
		"redistest: redis-server not on PATH: 2 tests ran on the embedded Redis instead; install it: " + InstallHint("redis-server"),
	}) {
		t.Fatalf("%q", got)
	}
	a.skip("redis-server", "TestC")
	a.skip("chromium", "TestD/one")
	a.skip("chromium", "TestD/two")
	if got := a.summary(); !slices.Equal(got, []string{
		"redistest: chromium not on PATH: 2 tests skipped; install it: apt-get install -y chromium",
		"redistest: redis-server not on PATH: 1 test skipped, 2 tests ran on the embedded Redis instead; install it: " + InstallHint("redis-server"),
	}) {
		t.Fatalf("%q", got)
	}
}

// TestNeed: a missing program skips the test (outside strict mode) and is
// counted for the summary.
func TestNeed(t *testing.T) {
	t.Setenv(EnvStrict, "")
	reached := false
	t.Run("missing", func(t *testing.T) {
		Need(t, "no-such-program-ratescope")
		reached = true
	})
	if reached {
		t.Fatal("Need returned for a missing program")
	}
	absent.mu.Lock()
	counted := absent.skipped["no-such-program-ratescope"]["TestNeed/missing"]
	delete(absent.skipped, "no-such-program-ratescope")
	absent.mu.Unlock()
	if !counted {
		t.Fatal("the skip was not counted")
	}
	if path := Need(t, "go"); path == "" {
		t.Fatal("Need found no go")
	}
}

// TestDeployment: the sentinels name the first node; a write there reaches
// the replica; after the master is killed they name the replica, which
// answers as a master; the old master restarts empty.
func TestDeployment(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	d := StartDeployment(t, DeploymentConfig{})
	t.Logf("started in %s: %s", time.Since(start).Round(time.Millisecond), d.URL)
	old := d.Master()
	if old != d.Nodes[0].Addr {
		t.Fatalf("the sentinels name %s, want %s", old, d.Nodes[0].Addr)
	}
	if err := d.Client(old).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	replica := d.Client(d.Nodes[1].Addr)
	if err := WaitReady(ctx, 5*time.Second, nil, func() error { return replica.Get(ctx, "k").Err() }); err != nil {
		t.Fatalf("the replica did not get the write: %v", err)
	}
	d.Kill(old)
	killed := time.Now()
	moved := d.WaitMoved(old)
	t.Logf("moved to %s %s after the kill", moved, time.Since(killed).Round(time.Millisecond))
	if moved != d.Nodes[1].Addr {
		t.Fatalf("moved to %s, want %s", moved, d.Nodes[1].Addr)
	}
	if v, err := d.Client(moved).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("the promoted replica has %q, %v", v, err)
	}
	d.Restart(old)
	if n, err := d.Client(old).DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("the restarted node holds %d keys, %v", n, err)
	}
	if !strings.HasPrefix(SentinelURL([]string{"a:1", "b:2"}), "redis://a:1?master_name="+MasterName+"&addr=b:2") {
		t.Fatal(SentinelURL([]string{"a:1", "b:2"}))
	}
}

type lines struct{ strings.Builder }

func (*lines) Close() error { return nil }

// TestTellReachesTheTerminal: without -v, go test shows a passing package's
// output to no one, so the summary also goes to the terminal; with -v it is
// shown already and goes there once only; no summary, nothing anywhere.
func TestTellReachesTheTerminal(t *testing.T) {
	summary := []string{"redistest: redis-server not on PATH: 3 tests skipped"}
	for _, tc := range []struct {
		lines    []string
		verbose  bool
		out, tty string
	}{
		{summary, false, summary[0] + "\n", summary[0] + "\n"},
		{summary, true, summary[0] + "\n", ""},
		{nil, false, "", ""},
	} {
		var out strings.Builder
		tty := &lines{}
		tell(tc.lines, &out, tc.verbose, func() (io.WriteCloser, error) { return tty, nil })
		if out.String() != tc.out || tty.String() != tc.tty {
			t.Errorf("lines %q, verbose %v: out %q, terminal %q; want %q, %q", tc.lines, tc.verbose, out.String(), tty.String(), tc.out, tc.tty)
		}
	}
	var out strings.Builder
	tell(summary, &out, false, func() (io.WriteCloser, error) { return nil, errors.New("no terminal") })
	if out.String() != summary[0]+"\n" {
		t.Errorf("with no terminal: out %q", out.String())
	}
}
