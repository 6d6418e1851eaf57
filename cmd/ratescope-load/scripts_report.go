package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratescope/ratescope/internal/redistest"
)

// envoyBarConfig is envoyproxy/ratelimit's config for the bar: two
// descriptors nobody fills, so every call is allowed and counted.
const envoyBarConfig = `domain: scripts
descriptors:
  - key: one
    rate_limit: {unit: second, requests_per_unit: 100000}
  - key: two
    rate_limit: {unit: minute, requests_per_unit: 1000000}
`

// barFigures are envoyproxy/ratelimit's per request, by descriptors per request.
type barFigures struct {
	usec, cpu []float64 // Redis µs per request: INCRBY + EXPIRE's own; redis-server CPU
}

// envoyBar measures envoyproxy/ratelimit's fixed window on the run's
// redis-server, when a binary or source is given; nil otherwise.
func envoyBar(ctx context.Context, e *env) (map[int]*barFigures, error) {
	o := e.o
	bin := o.envoyRLBin
	if bin == "" && o.envoySrc == "" {
		return nil, nil
	}
	if bin == "" {
		progress("  building envoyproxy/ratelimit from %s…", o.envoySrc)
		b, _, err := buildEnvoyRL(ctx, o.envoySrc, e.dir)
		if err != nil {
			return nil, err
		}
		bin = b
	}
	opt, err := redis.ParseURL(e.redisURL)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the Redis URL: %w", err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	root := filepath.Join(e.dir, "bar-runtime")
	confDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return nil, fmt.Errorf("failed to create the runtime folder: %w", err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "scripts.yaml"), []byte(envoyBarConfig), 0o644); err != nil {
		return nil, fmt.Errorf("failed to write the config file: %w", err)
	}
	port, err := redistest.FreePort()
	if err != nil {
		return nil, err
	}
	proc, err := startEnvoyRL(ctx, e.dir, bin, []string{
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + opt.Addr, "LOCAL_CACHE_SIZE_IN_BYTES=0",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(port),
	}, "envoy-rl-bar.log")
	if err != nil {
		return nil, err
	}
	t := &rlsTarget{name: "envoyproxy/ratelimit", proc: proc, grpc: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	defer func() {
		for _, c := range t.conns {
			c.Close()
		}
		proc.stop()
	}()
	for range envoyClientConns {
		c, err := grpc.NewClient(t.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("failed to dial envoyproxy/ratelimit: %w", err)
		}
		t.conns = append(t.conns, c)
	}
	req := func(descriptors int) func(worker, i int) *rlsv3.RateLimitRequest {
		return func(worker, i int) *rlsv3.RateLimitRequest {
			user := "u-" + strconv.Itoa((worker+i*o.conns)%o.keys)
			r := &rlsv3.RateLimitRequest{Domain: "scripts"}
			for _, k := range []string{"one", "two"}[:descriptors] {
				r.Descriptors = append(r.Descriptors, &ratelimitv3.RateLimitDescriptor{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: user}},
				})
			}
			return r
		}
	}
	bar := map[int]*barFigures{1: {}, 2: {}}
	if _, err := driveRLS(ctx, t, o.conns, httpWarmup, req(1)); err != nil {
		return nil, fmt.Errorf("failed to warm up envoyproxy/ratelimit: %w", err)
	}
	progress("  envoyproxy/ratelimit: %d rounds", o.rounds)
	for range o.rounds {
		for _, n := range []int{1, 2} {
			before, err := readScriptCounters(ctx, rdb)
			if err != nil {
				return nil, err
			}
			res, err := driveRLS(ctx, t, o.conns, o.slice(), req(n))
			if err != nil {
				return nil, err
			}
			after, err := readScriptCounters(ctx, rdb)
			if err != nil {
				return nil, err
			}
			if res.over > 0 {
				return nil, fmt.Errorf("envoyproxy/ratelimit answered %d calls OVER_LIMIT under limits nobody reaches", res.over)
			}
			calls := float64(res.ok)
			usec := after.usec["incrby"] - before.usec["incrby"] + after.usec["expire"] - before.usec["expire"]
			bar[n].usec = append(bar[n].usec, usec/calls)
			bar[n].cpu = append(bar[n].cpu, (after.cpu-before.cpu)*1e6/calls)
		}
	}
	return bar, nil
}

// scriptReport writes the scripts phase's section.
func scriptReport(e *env, variants []scriptVariant, cases []scriptCase, figs map[scriptCase]map[string][]*scriptFigures, steadyKeys map[scriptCase]int, bar map[int]*barFigures, workers int) {
	o, r := e.o, e.rep
	r.line("")
	r.line("## What a decision of the log costs Redis")
	r.line("")
	names := make([]string, len(variants))
	for i, v := range variants {
		names[i] = "`" + v.name + "`"
	}
	r.line("The check script, versions %s, driven directly (%d goroutines × pipelines of %d, as the limiter batches) on one redis-server, variants taking turns in each of %d rounds on keys of their own. Allowed: fresh logs with day-long windows filled to the limit (max(1, %d ÷ limit) logs; every size from empty to the limit). Denied: %d checks on those full logs. Steady: 1 s windows (and 2 s for the second rule) over as many keys as keep each log about a quarter full at %d checks/s (paced), %s per round after a second's warm-up: each check evicts what slid out. Two rules: the limit over 12 h (1 s) and twice it over 24 h (2 s). Figures are medians over the rounds.",
		strings.Join(names, ", "), workers, o.pipeline, o.rounds, o.scriptChecks, o.scriptChecks, o.scriptRate, o.slice())
	r.line("")
	r.line("- **script µs**: EVALSHA's usec ÷ calls in INFO commandstats — the script's own run time, I/O excluded")
	r.line("- **CPU µs**: redis-server's CPU time (INFO cpu, user + sys) ÷ decisions — everything the process did for them")
	r.line("")
	head := "| workload | case |"
	sep := "|---|---|"
	for _, v := range variants {
		head += fmt.Sprintf(" %s script µs · CPU µs |", v.name)
		sep += "---:|"
	}
	for _, v := range variants[1:] {
		head += fmt.Sprintf(" %s ÷ %s, script · CPU |", v.name, variants[0].name)
		sep += "---:|"
	}
	r.line("%s", head)
	r.line("%s", sep)
	for _, w := range scriptWorkloads {
		for _, c := range cases {
			fs := figs[c][w]
			row := fmt.Sprintf("| %s | %s |", w, c)
			if w == "steady" {
				row = fmt.Sprintf("| %s (%d keys) | %s |", w, steadyKeys[c], c)
			}
			for _, f := range fs {
				row += fmt.Sprintf(" %.2f · %.2f |", median(f.usec), median(f.cpu))
			}
			for _, f := range fs[1:] {
				row += fmt.Sprintf(" **%.2f** · %.2f |", median(ratios(f.usec, fs[0].usec)), median(ratios(f.cpu, fs[0].cpu)))
			}
			r.line("%s", row)
		}
	}
	r.line("")
	for _, c := range cases {
		f := figs[c]["steady"]
		var parts []string
		for i, v := range variants {
			total := f[i].allowed + f[i].denied
			parts = append(parts, fmt.Sprintf("%s %.0f/s, %.1f %% denied", v.name, median(f[i].rate), 100*float64(f[i].denied)/float64(max(1, total))))
		}
		r.line("- steady, %s: %s", c, strings.Join(parts, "; "))
	}
	r.line("")
	if bar == nil {
		r.line("envoyproxy/ratelimit's fixed window was not measured: pass --envoy-rl-bin (a built binary) or --envoy-rl-src.")
		return
	}
	r.line("The bar, envoyproxy/ratelimit on the same redis-server (%d goroutines over %d HTTP/2 connections, %d users, all allowed, local cache off): its fixed window costs Redis one INCRBY and one EXPIRE per descriptor, and Redis's figures are per request (\"script µs\" here is INCRBY + EXPIRE's usec). It pipelines one request's commands per round trip, the log's driver %d scripts, so its CPU µs carry more I/O per decision.", o.conns, envoyClientConns, o.keys, o.pipeline)
	r.line("")
	r.line("| descriptors (rules) per request | Redis µs · CPU µs per request | %s ÷ it, steady at limit 1,000, script · CPU |", variants[len(variants)-1].name)
	r.line("|---|---:|---:|")
	last := len(variants) - 1
	for _, n := range []int{1, 2} {
		s := figs[scriptCase{1_000, n}]["steady"][last]
		r.line("| %d | %.2f · %.2f | %.2f · %.2f |", n, median(bar[n].usec), median(bar[n].cpu), median(s.usec)/median(bar[n].usec), median(s.cpu)/median(bar[n].cpu))
	}
}
