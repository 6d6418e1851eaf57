package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name a Deployment's sentinels know its master by.
const MasterName = "mymaster"

// sentinelTimeout bounds each wait for a Deployment to settle.
const sentinelTimeout = 30 * time.Second

// DeploymentConfig shapes a Deployment; zero values take the defaults.
type DeploymentConfig struct {
	Replicas  int // replicas of the master (default 1)
	Sentinels int // sentinels (default 3); the quorum is a majority of them
	// DownAfter is the sentinels' down-after-milliseconds: how long a silent
	// master takes to be thought down (default 1 s).
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout (default 5 s).
	FailoverTimeout time.Duration
	// NodeArgs are added to every data node's arguments, e.g.
	// "--min-replicas-to-write", "1".
	NodeArgs []string
}

func (c DeploymentConfig) withDefaults() DeploymentConfig {
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Sentinels <= 0 {
		c.Sentinels = 3
	}
	if c.DownAfter <= 0 {
		c.DownAfter = time.Second
	}
	if c.FailoverTimeout <= 0 {
		c.FailoverTimeout = 5 * time.Second
	}
	return c
}

// Deployment is a master with replicas, watched by sentinels (each a
// redis-server started with --sentinel), all on free ports of 127.0.0.1 with
// no persistence and a folder each. Which node is the master changes with
// failovers: WaitMaster says which one the sentinels name now. Its methods
// return plain errors; the test helper is StartDeployment.
type Deployment struct {
	// Nodes are the data nodes; Nodes[0] started as the master, the others
	// as its replicas. Restarting one starts it empty, in its first role.
	Nodes     []*Process
	Sentinels []*Process
	// URL is ratescope's Sentinel URL for the deployment:
	// redis://s1?master_name=mymaster&addr=s2&addr=s3
	URL string
}

// LaunchDeployment starts a Deployment with its folders below dir and waits
// until the replicas are in sync and every sentinel knows every replica and
// every other sentinel. On error, whatever started is stopped.
func LaunchDeployment(ctx context.Context, dir string, cfg DeploymentConfig) (d *Deployment, err error) {
	cfg = cfg.withDefaults()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("failed to find redis-server on PATH (%s): %w", InstallHint("redis-server"), err)
	}
	d = &Deployment{}
	defer func() {
		if err != nil {
			d.Stop()
		}
	}()
	start := func(name string, p *Process) (*Process, error) {
		p.bin, p.dir = bin, filepath.Join(dir, name)
		if err := os.MkdirAll(p.dir, 0o755); err != nil {
			return nil, fmt.Errorf("failed to create %s's folder: %w", name, err)
		}
		return launchOnFreePort(ctx, p, false)
	}
	master, err := start("node0", &Process{args: cfg.NodeArgs})
	if err != nil {
		return d, err
	}
	d.Nodes = append(d.Nodes, master)
	// The first sync starts as soon as every replica asks, not after the
	// default 5 s wait for more replicas; restarted nodes keep the default.
	if err := configSet(ctx, master.Addr, "repl-diskless-sync-max-replicas", strconv.Itoa(cfg.Replicas)); err != nil {
		return d, err
	}
	for i := 1; i <= cfg.Replicas; i++ {
		args := append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.port)}, cfg.NodeArgs...)
		r, err := start(fmt.Sprintf("node%d", i), &Process{args: args})
		if err != nil {
			return d, err
		}
		d.Nodes = append(d.Nodes, r)
	}
	if err := WaitReady(ctx, sentinelTimeout, nil, func() error { return inSync(ctx, master.Addr, cfg.Replicas) }); err != nil {
		return d, fmt.Errorf("failed to get the replicas in sync: %w", err)
	}
	if err := configSet(ctx, master.Addr, "repl-diskless-sync-max-replicas", "0"); err != nil {
		return d, err
	}
	for i := range cfg.Sentinels {
		name := fmt.Sprintf("sentinel%d", i)
		conf := filepath.Join(dir, name, "sentinel.conf")
		if err := os.MkdirAll(filepath.Dir(conf), 0o755); err != nil {
			return d, fmt.Errorf("failed to create %s's folder: %w", name, err)
		}
		text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\nsentinel down-after-milliseconds %[1]s %[4]d\nsentinel failover-timeout %[1]s %[5]d\n",
			MasterName, master.port, cfg.Sentinels/2+1, cfg.DownAfter.Milliseconds(), cfg.FailoverTimeout.Milliseconds())
		// A sentinel rewrites its file: each has its own.
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return d, fmt.Errorf("failed to write %s's config: %w", name, err)
		}
		s, err := start(name, &Process{conf: conf, args: []string{"--sentinel"}})
		if err != nil {
			return d, err
		}
		d.Sentinels = append(d.Sentinels, s)
	}
	d.URL = SentinelURL(d.sentinelAddrs())
	for _, s := range d.Sentinels {
		if err := WaitReady(ctx, sentinelTimeout, nil, func() error { return knowsAll(ctx, s.Addr, cfg) }); err != nil {
			return d, fmt.Errorf("failed to settle sentinel %s: %w", s.Addr, err)
		}
	}
	return d, nil
}

// SentinelURL is ratescope's Redis URL for the sentinels at addrs:
// redis://s1?master_name=mymaster&addr=s2&addr=s3
func SentinelURL(addrs []string) string {
	u := "redis://" + addrs[0] + "?master_name=" + MasterName
	for _, a := range addrs[1:] {
		u += "&addr=" + a
	}
	return u
}

func (d *Deployment) sentinelAddrs() []string {
	addrs := make([]string, len(d.Sentinels))
	for i, s := range d.Sentinels {
		addrs[i] = s.Addr
	}
	return addrs
}

// Node is the data node at addr, nil if none is.
func (d *Deployment) Node(addr string) *Process {
	for _, n := range d.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Views asks each sentinel which master it names now: one address per
// sentinel, "" for one that does not answer (stopped or paused).
func (d *Deployment) Views(ctx context.Context) []string {
	views := make([]string, len(d.Sentinels))
	for i, s := range d.Sentinels {
		if s.Answering() {
			views[i], _ = masterOf(ctx, s.Addr)
		}
	}
	return views
}

// Flags asks each sentinel how it sees the master it names: its flags, e.g.
// "master,s_down,o_down,failover_in_progress"; "" for a sentinel that does
// not answer.
func (d *Deployment) Flags(ctx context.Context) []string {
	flags := make([]string, len(d.Sentinels))
	for i, s := range d.Sentinels {
		if !s.Answering() {
			continue
		}
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
		if m, err := c.Master(ctx, MasterName).Result(); err == nil {
			flags[i] = m["flags"]
		}
		_ = c.Close()
	}
	return flags
}

// WaitMaster waits until every answering sentinel names the same master,
// one that accept takes (nil: any) and that answers as a master, and returns
// its address.
func (d *Deployment) WaitMaster(ctx context.Context, timeout time.Duration, accept func(addr string) bool) (string, error) {
	var master string
	err := WaitReady(ctx, timeout, nil, func() error {
		master = ""
		for i, v := range d.Views(ctx) {
			if !d.Sentinels[i].Answering() {
				continue
			}
			switch {
			case v == "":
				return fmt.Errorf("sentinel %s names no master", d.Sentinels[i].Addr)
			case master != "" && v != master:
				return fmt.Errorf("the sentinels name %s and %s", master, v)
			}
			master = v
		}
		if master == "" {
			return errors.New("no sentinel answers")
		}
		if accept != nil && !accept(master) {
			return fmt.Errorf("the sentinels still name %s", master)
		}
		return isMaster(ctx, master)
	})
	return master, err
}

// Failover asks the first answering sentinel to fail the master over now
// (SENTINEL FAILOVER), as an operator would.
func (d *Deployment) Failover(ctx context.Context) error {
	for _, s := range d.Sentinels {
		if !s.Answering() {
			continue
		}
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		defer c.Close()
		if err := c.Failover(ctx, MasterName).Err(); err != nil {
			return fmt.Errorf("failed to start a failover: %w", err)
		}
		return nil
	}
	return errors.New("failed to start a failover: no sentinel answers")
}

// SentinelLogs is the last n lines of each sentinel's log, for a failure
// message.
func (d *Deployment) SentinelLogs(n int) string {
	var b strings.Builder
	for _, s := range d.Sentinels {
		out, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		fmt.Fprintf(&b, "--- sentinel %s:\n%s\n", s.Addr, lastLines(string(out), n))
	}
	return b.String()
}

// Switches counts the masters the first sentinel has switched to since it
// started (its log's +switch-master lines): the failovers it took part in.
func (d *Deployment) Switches() int {
	out, _ := os.ReadFile(filepath.Join(d.Sentinels[0].dir, "redis.log"))
	return strings.Count(string(out), "+switch-master")
}

// Stop stops every sentinel, then every node.
func (d *Deployment) Stop() {
	StopAll(d.Sentinels)
	StopAll(d.Nodes)
}

// Sentinels is a Deployment owned by a test and stopped when it ends; a
// failure to drive it fails the test.
type Sentinels struct {
	*Deployment
	t testing.TB
}

// StartDeployment starts a Deployment for the test (skipped without
// redis-server, failed under strict).
func StartDeployment(t testing.TB, cfg DeploymentConfig) *Sentinels {
	t.Helper()
	Need(t, "redis-server")
	d, err := LaunchDeployment(context.Background(), t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return &Sentinels{Deployment: d, t: t}
}

// Master is the address of the master every answering sentinel names.
func (s *Sentinels) Master() string {
	s.t.Helper()
	m, err := s.WaitMaster(context.Background(), sentinelTimeout, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

// WaitMoved waits until every answering sentinel names a master other than
// from, one that answers as a master, and returns its address.
func (s *Sentinels) WaitMoved(from string) string {
	s.t.Helper()
	m, err := s.WaitMaster(context.Background(), sentinelTimeout, func(a string) bool { return a != from })
	if err != nil {
		s.t.Fatalf("failed to see the sentinels move from %s: %v\n%s", from, err, s.SentinelLogs(20))
	}
	return m
}

// Client returns a client of the node or sentinel at addr, closed when the
// test ends.
func (s *Sentinels) Client(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the node or sentinel at addr with SIGKILL, as a crash would.
func (s *Sentinels) Kill(addr string) { s.process(addr).Stop() }

// Restart starts the node or sentinel at addr again on its port: a node
// comes back empty, in the role it started in.
func (s *Sentinels) Restart(addr string) {
	s.t.Helper()
	if err := s.process(addr).Restart(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// Pause freezes the node or sentinel at addr (SIGSTOP).
func (s *Sentinels) Pause(addr string) {
	s.t.Helper()
	if err := s.process(addr).Pause(); err != nil {
		s.t.Fatal(err)
	}
}

// Resume undoes Pause.
func (s *Sentinels) Resume(addr string) {
	s.t.Helper()
	if err := s.process(addr).Resume(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *Sentinels) process(addr string) *Process {
	s.t.Helper()
	for _, p := range append(append([]*Process{}, s.Nodes...), s.Sentinels...) {
		if p.Addr == addr {
			return p
		}
	}
	s.t.Fatalf("no node or sentinel at %s", addr)
	return nil
}
