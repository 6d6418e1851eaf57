// Command ratescope-load measures ratescope on this machine in one run and
// prints a Markdown report:
//
//   - HTTP: POST /api/v1/check against the same server's trivial GET /healthz;
//   - the limiter library against raw pipelined EVALSHA of the same script and
//     a plain go-redis Script.Run per call, on the same Redis;
//   - WebSocket fan-out: N viewers of one window, time from a check to every
//     viewer's decision message, and memory per idle viewer.
//
// It starts its own redis-server (unless --redis-url is given) and runs the
// server as a separate process (itself, re-executed with "serve"), so the
// server's memory and CPU are its own. Everything listens on 127.0.0.1 only.
//
//	go run ./cmd/ratescope-load                      # all phases, ~1 minute
//	go run ./cmd/ratescope-load --only ws --viewers 10000
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ratescope/ratescope/server"
)

type options struct {
	redisURL string
	duration time.Duration
	conns    int
	viewers  int
	checks   int
	only     string
	out      string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		// The server under test, in its own process.
		if err := server.Run(context.Background(), append([]string{"ratescope"}, os.Args[2:]...), os.Getenv, io.Discard); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.redisURL, "redis-url", "", "a Redis to use; empty starts a redis-server on a free port")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "how long each throughput measurement runs")
	flag.IntVar(&o.conns, "conns", 64, "concurrent HTTP connections and library goroutines")
	flag.IntVar(&o.viewers, "viewers", 1000, "WebSocket viewers on one window")
	flag.IntVar(&o.checks, "checks", 50, "checks whose decisions are timed to every viewer")
	flag.StringVar(&o.only, "only", "", "run one phase: http, lib or ws")
	flag.StringVar(&o.out, "out", "", "also write the report to this file")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "ratescope-load:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	raiseFileLimit()
	var rep report
	rep.header(o)

	url := o.redisURL
	if url == "" {
		rs, err := startRedis()
		if err != nil {
			return err
		}
		defer rs.stop()
		url = rs.url
		rep.line("redis-server: started on %s (%s)", rs.addr, rs.version)
	}
	phases := map[string]func(context.Context, options, string, *report) error{
		"http": measureHTTP, "lib": measureLibrary, "ws": measureFanOut,
	}
	for _, name := range []string{"http", "lib", "ws"} {
		if o.only != "" && o.only != name {
			continue
		}
		if err := phases[name](ctx, o, url, &rep); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	fmt.Print(rep.String())
	if o.out != "" {
		return os.WriteFile(o.out, []byte(rep.String()), 0o644)
	}
	return nil
}

// raiseFileLimit lets 10,000 viewers (two sockets each on this machine) open.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

type report struct{ b strings.Builder }

func (r *report) line(format string, args ...any) { fmt.Fprintf(&r.b, format+"\n", args...) }
func (r *report) String() string                  { return r.b.String() }

func (r *report) header(o options) {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	r.line("# ratescope-load, %s", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	r.line("")
	r.line("machine: %s, %d cores visible to Go; load generator and server share them.", cpu, numCPU())
	r.line("flags: duration %s, conns %d, viewers %d, checks %d", o.duration, o.conns, o.viewers, o.checks)
}
