// Command ratescope-load measures ratescope on this machine in one run and
// prints a Markdown report (issue #6, "Performance"):
//
//   - HTTP: POST /api/v1/check against the same server's trivial GET /healthz,
//     with the same keep-alive connections: req/s, latency percentiles, ratio —
//     all allowed, and a flood (90 % of checks on 100 keys over their limit,
//     10 % on fresh keys) beside it;
//   - library: limiter.Allow against raw pipelined EVALSHA of the same script
//     and a plain go-redis Script.Run per call, on the same Redis: checks/s;
//   - WebSocket fan-out: N viewers of one window; the time from sending a check
//     until every viewer has its decision message, and memory per idle viewer —
//     for ratescope and, in the same run, for a minimal coder/websocket reference
//     server with the same tick stream (reference.go), reported as a ratio;
//   - algorithms (SPEC §8): per algorithm, Redis µs per check and bytes per
//     key at limits 10, 1,000 and 100,000, and agreement with the log on one
//     recorded bursty trace (--trace-duration, replayed in real time);
//   - with --waiters (waiters.go): --waiter-count checks (10,000) held at once
//     on one instance until their booked slots — the server's heap, RSS and
//     goroutines per held request, and its CPU while holding them;
//   - with --failover, that phase alone (failover.go, SPEC §10): a Sentinel
//     deployment's master killed under load and brought back empty, with and
//     without --durable-replicas 1, on 1 and 2 replicas — admissions over the
//     limit, forgotten decisions, fail-mode answers, and what durability costs.
//
// It starts its own redis-server on a free port (unless --redis-url is given)
// and runs the server as a separate process — this binary re-executed with the
// hidden first argument "serve" — so the server's memory and CPU are its own.
// Everything listens on 127.0.0.1 only; every child process is stopped at the
// end, on failure and on Ctrl-C.
//
//	go run ./cmd/ratescope-load                       # every phase, a few minutes
//	go run ./cmd/ratescope-load --skip-http --skip-lib --skip-ws   # the algorithms only
//	go run ./cmd/ratescope-load --skip-http --skip-lib --skip-algos --viewers 1000,2000,10000
//	go run ./cmd/ratescope-load --failover                   # a Sentinel failover under load, ~16 min
//
// With --overview it also measures what the traffic overview costs the check
// path, with nobody watching it and with one watcher (overview.go):
//
//	go run ./cmd/ratescope-load --skip-http --skip-lib --skip-ws --skip-algos --overview
//
// With --envoy it also measures the Envoy rate limit service against
// envoyproxy/ratelimit built from its source (envoy.go):
//
//	go run ./cmd/ratescope-load --skip-http --skip-lib --skip-ws --skip-algos --envoy --envoy-rl-src ~/src/ratelimit
//
// With --scripts it measures what a decision of the log costs Redis, A/B
// against other versions of the check script, with envoyproxy/ratelimit's
// fixed window as the bar (scripts.go):
//
//	git show <rev>:limiter/check.lua > /tmp/before.lua
//	go run ./cmd/ratescope-load --skip-http --skip-lib --skip-ws --skip-algos \
//	    --scripts --script before=/tmp/before.lua --envoy-rl-bin ~/bin/envoy-rl
//
// With --outcomes it measures what a refund and a settle cost beside a
// check, through the limiter (Limiter.Refund, Limiter.Settle against
// Limiter.Allow) on a redis-server of its own: calls/s from --conns callers,
// and Redis's script µs and CPU µs per call, each as a ratio to the check's
// (outcomes.go):
//
//	go run ./cmd/ratescope-load --skip-http --skip-lib --skip-ws --skip-algos --outcomes
//
// With --leases it measures what a concurrency lease costs beside a check:
// Limiter.Acquire then Release against Limiter.Allow, the baseline of the
// same run, on a redis-server of its own: units/s and calls/s from --conns
// callers, Redis's script µs and CPU µs per call (leases.go):
//
//	go run ./cmd/ratescope-load --skip-http --skip-lib --skip-ws --skip-algos --leases
//
// With --quota-memory it measures what a calendar quota costs Redis per
// client: --quota-keys keys checked once each on a month quota, INFO
// memory's used_memory before and after (quota.go):
//
//	go run ./cmd/ratescope-load --skip-http --skip-lib --skip-ws --skip-algos --quota-memory
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
)

type options struct {
	redisURL      string
	duration      time.Duration
	rounds        int
	conns         int
	keys          int
	pipeline      int
	viewers       viewerCounts
	checks        int
	checkInterval time.Duration
	tickInterval  time.Duration
	skipHTTP      bool
	skipLib       bool
	skipWS        bool
	skipAlgos     bool
	traceDuration time.Duration
	skipReference bool
	out           string
	// The Envoy phase, off unless --envoy: it builds envoyproxy/ratelimit.
	overview        bool
	envoy           bool
	envoySrc        string
	envoyLocalCache int
	envoyRLBin      string
	// envoyCheckTimeout is ratescope's --check-timeout in the Envoy phase.
	envoyCheckTimeout time.Duration

	// The outcomes phase, off unless --outcomes.
	outcomes bool

	// The leases phase, off unless --leases.
	leases bool
	// The quota-memory phase, off unless --quota-memory.
	quotaMemory bool
	memory      bool
	quotaKeys   int
	// The waiters phase, off unless --waiters.
	waiters     bool
	waiterCount int
	waiterHold  time.Duration

	// The scripts phase, off unless --scripts.
	scriptsPhase bool
	scripts      []string // NAME=FILE
	scriptChecks int
	scriptRate   int

	failover         bool
	failoverRate     int
	failoverRuns     int
	failoverRestart  time.Duration
	failoverReplicas []int
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(serveMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "reference" {
		os.Exit(referenceMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "floor-sink" {
		os.Exit(floorSinkMain(os.Args[2:]))
	}
	var o options
	flag.StringVar(&o.redisURL, "redis-url", "", "a Redis to use (redis://host:port/db); empty starts a redis-server on a free port")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "how long each throughput variant runs in all")
	flag.IntVar(&o.rounds, "rounds", 5, "interleaved rounds the duration of each throughput variant is split into")
	flag.IntVar(&o.conns, "conns", 64, "concurrent HTTP connections, and goroutines calling the library")
	flag.IntVar(&o.keys, "keys", 10000, "distinct client keys the HTTP and library load spreads over")
	flag.IntVar(&o.pipeline, "pipeline", 16, "EVALSHA calls per pipeline in the raw baseline")
	o.viewers = viewerCounts{1000, 2000}
	flag.Var(&o.viewers, "viewers", "WebSocket viewers on one window: a count or a comma-separated list, each measured in turn")
	flag.IntVar(&o.checks, "checks", 50, "checks whose decisions are timed to every viewer")
	flag.DurationVar(&o.checkInterval, "check-interval", 100*time.Millisecond, "the least time between two timed checks")
	flag.DurationVar(&o.tickInterval, "tick-interval", 100*time.Millisecond, "the server's --tick-interval in the fan-out phase")
	flag.BoolVar(&o.skipHTTP, "skip-http", false, "skip the HTTP phase")
	flag.BoolVar(&o.skipLib, "skip-lib", false, "skip the library phase")
	flag.BoolVar(&o.skipWS, "skip-ws", false, "skip the WebSocket fan-out phase")
	flag.BoolVar(&o.skipAlgos, "skip-algos", false, "skip the algorithms phase (cost per check, bytes per key, agreement on a trace)")
	flag.DurationVar(&o.traceDuration, "trace-duration", time.Minute, "how long the algorithms phase's trace lasts (it is replayed in real time)")
	flag.BoolVar(&o.skipReference, "skip-reference", false, "measure ratescope's fan-out without the reference server beside it")
	flag.StringVar(&o.out, "out", "", "also write the report to this file")
	flag.BoolVar(&o.overview, "overview", false, "also run the overview phase: check / healthz with nobody watching the traffic overview, and with one watcher (two server processes)")
	flag.BoolVar(&o.envoy, "envoy", false, "also run the Envoy phase: ShouldRateLimit against envoyproxy/ratelimit built from its source (needs git and go)")
	flag.StringVar(&o.envoySrc, "envoy-rl-src", "", "envoyproxy/ratelimit's source for --envoy: a checkout, or a git repository to clone; empty: a shallow clone of github.com/envoyproxy/ratelimit")
	flag.IntVar(&o.envoyLocalCache, "envoy-rl-local-cache", 0, "also measure envoyproxy/ratelimit with LOCAL_CACHE_SIZE_IN_BYTES set to this (its over-limit cache); 0: not")
	flag.StringVar(&o.envoyRLBin, "envoy-rl-bin", "", "a built envoyproxy/ratelimit service binary for --envoy and --scripts, instead of building it")
	flag.DurationVar(&o.envoyCheckTimeout, "envoy-check-timeout", 10*time.Second, "ratescope's check timeout in the Envoy phase (envoyproxy/ratelimit waits up to 10 s for Redis); the default, 150ms, shows what a saturated machine does to it")
	flag.BoolVar(&o.scriptsPhase, "scripts", false, "also run the scripts phase: what a decision of the log costs Redis (INFO commandstats, INFO cpu), A/B against each --script")
	flag.BoolVar(&o.outcomes, "outcomes", false, "also run the outcomes phase: refund and settle calls/s and Redis's cost per call beside a check's, through the limiter on a redis-server of its own")
	flag.BoolVar(&o.leases, "leases", false, "also run the leases phase: acquire + release calls/s and Redis's cost per call beside a check's (the baseline of the same run), through the limiter on a redis-server of its own")
	flag.BoolVar(&o.memory, "memory", false, "also run the memory phase: Redis memory per key and per entry of a window's log (below and above the sorted set's listpack size) and of leases, for sizing Redis")
	flag.BoolVar(&o.quotaMemory, "quota-memory", false, "also run the quota-memory phase: Redis memory per client of a month quota (INFO memory), over --quota-keys keys checked once each")
	flag.IntVar(&o.quotaKeys, "quota-keys", 100_000, "client keys of the quota-memory phase")
	flag.BoolVar(&o.waiters, "waiters", false, "also run the waiters phase: memory and CPU of the server per check held for its booked slot, --waiter-count held at once on one instance")
	flag.IntVar(&o.waiterCount, "waiter-count", 10_000, "checks the waiters phase holds at once (one connection each)")
	flag.DurationVar(&o.waiterHold, "waiter-hold", 20*time.Second, "about how long the waiters phase holds each check: its policy's window, whole seconds")
	flag.Var((*stringList)(&o.scripts), "script", "another version of the check script for --scripts, as NAME=FILE (repeatable; the first is the base of the ratios)")
	flag.IntVar(&o.scriptChecks, "script-checks", 10_000, "checks per fill and per denied run of the scripts phase (the fill covers at least the limit)")
	flag.IntVar(&o.scriptRate, "script-rate", 20_000, "checks per second of the scripts phase's steady workload (paced)")
	flag.BoolVar(&o.failover, "failover", false, "run only the failover phase: a Sentinel deployment's master killed under load, with and without durable replicas (needs redis-server; ignores --redis-url)")
	flag.IntVar(&o.failoverRate, "failover-rate", 500, "checks per second of the failover phase's load")
	flag.IntVar(&o.failoverRuns, "failover-runs", 3, "runs of each failover variant")
	flag.DurationVar(&o.failoverRestart, "failover-restart", 2*time.Second, "how long after the kill the old master starts again, empty")
	replicas := viewerCounts{1, 2}
	flag.Var(&replicas, "failover-replicas", "replica counts of the failover phase's deployments, comma-separated")
	flag.Parse()
	o.failoverReplicas = replicas
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "ratescope-load:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "ratescope-load:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case flag.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	case o.rounds < 1:
		return errors.New("--rounds must be at least 1")
	case o.slice() < 100*time.Millisecond:
		return errors.New("--duration / --rounds must be at least 100ms")
	case o.conns < 1, o.keys < 1, o.pipeline < 1, len(o.viewers) == 0, o.checks < 1:
		return errors.New("--conns, --keys, --pipeline, --viewers and --checks must be at least 1")
	case o.tickInterval < 10*time.Millisecond:
		return errors.New("--tick-interval must be at least 10ms, as the server requires")
	case o.checkInterval < 0:
		return errors.New("--check-interval must not be negative")
	case o.traceDuration < time.Second:
		return errors.New("--trace-duration must be at least 1s")
	case o.envoyCheckTimeout <= 0:
		return errors.New("--envoy-check-timeout must be positive")
	case o.quotaKeys < 1:
		return errors.New("--quota-keys must be at least 1")
	case o.waiterCount < 1 || o.waiterHold < 2*time.Second || o.waiterHold > 30*time.Second || o.waiterHold%time.Second != 0:
		return errors.New("--waiter-count must be at least 1, --waiter-hold whole seconds from 2s to 30s")
	case o.scriptChecks < 1 || o.scriptRate < 1:
		return errors.New("--script-checks and --script-rate must be at least 1")
	case o.failoverRate < 1 || o.failoverRuns < 1 || o.failoverRestart < 0:
		return errors.New("--failover-rate and --failover-runs must be at least 1, --failover-restart not negative")
	}
	return nil
}

// viewerCounts is --viewers: one count or a comma-separated list.
type viewerCounts []int

func (v *viewerCounts) String() string {
	s := make([]string, len(*v))
	for i, n := range *v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (v *viewerCounts) Set(s string) error {
	var out viewerCounts
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return fmt.Errorf("want viewer counts of at least 1, such as 1000,2000; got %q", part)
		}
		out = append(out, n)
	}
	*v = out
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, " ") }

func (l *stringList) Set(s string) error {
	if name, path, ok := strings.Cut(s, "="); !ok || name == "" || path == "" {
		return fmt.Errorf("want NAME=FILE, got %q", s)
	}
	*l = append(*l, s)
	return nil
}

// slice is how long one variant runs in one round.
func (o options) slice() time.Duration { return o.duration / time.Duration(o.rounds) }

// progress tells the operator what is going on; the report goes to stdout.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ratescope-load: "+format+"\n", args...)
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := &report{}
	m := describeMachine()
	rep.header(o, m)
	if n, err := raiseFileLimit(); err != nil {
		rep.line("- open-file limit: %v", err)
	} else {
		rep.line("- open-file limit (RLIMIT_NOFILE) raised to the hard limit, %d, in this process and the server's", n)
	}

	dir, err := os.MkdirTemp("", "ratescope-load-")
	if err != nil {
		return fmt.Errorf("failed to create a temporary folder: %w", err)
	}
	defer os.RemoveAll(dir)
	e := &env{o: o, redisURL: o.redisURL, dir: dir, rep: rep}
	if o.failover {
		return runFailover(ctx, e)
	}
	if e.redisURL == "" {
		rs, err := redistest.Launch(ctx, dir)
		if err != nil {
			return fmt.Errorf("%w (or pass --redis-url)", err)
		}
		defer rs.Stop()
		e.redis, e.redisURL = rs, rs.URL
		rep.line("- Redis: %s, started by this tool on %s (no persistence)", rs.Version(), rs.URL)
	} else {
		rep.line("- Redis: %s (given with --redis-url; its CPU is not measured)", o.redisURL)
	}

	phases := []struct {
		name string
		skip bool
		run  func(context.Context, *env) error
	}{
		{"HTTP", o.skipHTTP, measureHTTP},
		{"library", o.skipLib, measureLibrary},
		{"WebSocket fan-out", o.skipWS, measureFanOut},
		{"algorithms", o.skipAlgos, measureAlgorithms},
		{"overview", !o.overview, measureOverview},
		{"Envoy", !o.envoy, measureEnvoy},
		{"scripts", !o.scriptsPhase, measureScripts},
		{"outcomes", !o.outcomes, measureOutcomes},
		{"leases", !o.leases, measureLeases},
		{"quota memory", !o.quotaMemory, measureQuotaMemory},
		{"memory", !o.memory, measureMemory},
		{"waiters", !o.waiters, measureWaiters},
	}
	var failed []string
	for _, p := range phases {
		if p.skip || ctx.Err() != nil {
			continue
		}
		progress("%s phase…", p.name)
		if err := p.run(ctx, e); err != nil {
			failed = append(failed, p.name)
			rep.line("")
			rep.line("**The %s phase failed:** %v", p.name, err)
		}
	}
	return finish(ctx, o, rep, failed)
}

// runFailover is the run of --failover: that phase alone, on redis-servers
// of its own.
func runFailover(ctx context.Context, e *env) error {
	progress("failover phase…")
	var failed []string
	if err := measureFailover(ctx, e); err != nil {
		failed = append(failed, "failover")
		e.rep.line("")
		e.rep.line("**The failover phase failed:** %v", err)
	}
	return finish(ctx, e.o, e.rep, failed)
}

// finish prints the report, writes it to --out and says how the run ended.
func finish(ctx context.Context, o options, rep *report, failed []string) error {
	if ctx.Err() != nil {
		rep.line("")
		rep.line("**Interrupted**: the report is incomplete.")
	}
	fmt.Print(rep.String())
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(rep.String()), 0o644); err != nil {
			return fmt.Errorf("failed to write the report to %s: %w", o.out, err)
		}
	}
	switch {
	case ctx.Err() != nil:
		return errors.New("interrupted")
	case len(failed) > 0:
		return fmt.Errorf("failed phases: %v", failed)
	}
	return nil
}
