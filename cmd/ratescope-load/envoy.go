package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratescope/ratescope/internal/redistest"
)

// The Envoy phase (--envoy): ratescope's ShouldRateLimit against
// envoyproxy/ratelimit's, built from its own source into the temporary
// folder, on the same config file, each server on a fresh redis-server of
// its own. ratescope is started the way a Deployment of envoyproxy/ratelimit
// would start it with only the image changed: its environment
// (RUNTIME_ROOT, GRPC_PORT, REDIS_URL as host:port…).
//
// The all-allowed load spreads over --keys users under a limit nobody
// reaches; the flood sends 90 % of its calls to envoyFloodHotKeys users
// filled past their limit beforehand and the rest to users never seen.
const envoyConfig = `# ratescope-load's benchmark domain, in envoyproxy/ratelimit's format.
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 100000}
  - key: flood
    rate_limit: {unit: day, requests_per_unit: 10}
`

const (
	envoyFloodLimit   = 10
	envoyFloodHotKeys = 100
	// envoyClientConns is how many HTTP/2 connections the --conns workers
	// share, as a few Envoy workers would hold to the service.
	envoyClientConns = 4
)

// rlsTarget is one rate limit service under load.
type rlsTarget struct {
	name  string
	proc  *serverProc
	redis *redistest.Process
	grpc  string // host:port
	conns []*grpc.ClientConn
	runs  map[string]*rlsRun // by workload
}

// rlsRun accumulates one workload's rounds on one target.
type rlsRun struct {
	rates  []float64
	cpus   []cpuUse
	over   int64
	ok     int64
	failed int64
}

func measureEnvoy(ctx context.Context, e *env) error {
	o := e.o
	root := filepath.Join(e.dir, "runtime")
	confDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return fmt.Errorf("failed to create the runtime folder: %w", err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "bench.yaml"), []byte(envoyConfig), 0o644); err != nil {
		return fmt.Errorf("failed to write the config file: %w", err)
	}
	bin, rev := o.envoyRLBin, "a binary given with --envoy-rl-bin, "+o.envoyRLBin
	if bin == "" {
		progress("  building envoyproxy/ratelimit from %s…", orDefault(o.envoySrc, envoyRepo))
		var err error
		if bin, rev, err = buildEnvoyRL(ctx, o.envoySrc, e.dir); err != nil {
			return err
		}
	}

	var targets []*rlsTarget
	defer func() {
		for _, t := range targets {
			for _, c := range t.conns {
				c.Close()
			}
			t.proc.stop()
			t.redis.Stop()
		}
	}()
	add := func(name string, start func(rs *redistest.Process, grpcPort int) (*serverProc, error)) error {
		rdir := filepath.Join(e.dir, "redis-"+strconv.Itoa(len(targets)))
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			return fmt.Errorf("failed to create a folder for redis-server: %w", err)
		}
		rs, err := redistest.Launch(ctx, rdir)
		if err != nil {
			return err
		}
		port, err := redistest.FreePort()
		if err != nil {
			rs.Stop()
			return err
		}
		proc, err := start(rs, port)
		if err != nil {
			rs.Stop()
			return err
		}
		t := &rlsTarget{name: name, proc: proc, redis: rs, grpc: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), runs: map[string]*rlsRun{}}
		targets = append(targets, t)
		for range envoyClientConns {
			c, err := grpc.NewClient(t.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return fmt.Errorf("failed to dial %s: %w", name, err)
			}
			t.conns = append(t.conns, c)
		}
		return nil
	}
	envoyEnv := func(rs *redistest.Process, grpcPort int) []string {
		return []string{
			"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rs.Addr,
			"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort),
		}
	}
	if err := add("envoyproxy/ratelimit", func(rs *redistest.Process, grpcPort int) (*serverProc, error) {
		return startEnvoyRL(ctx, e.dir, bin, append(envoyEnv(rs, grpcPort), "LOCAL_CACHE_SIZE_IN_BYTES=0"), "envoy-rl.log")
	}); err != nil {
		return err
	}
	if o.envoyLocalCache > 0 {
		if err := add("envoyproxy/ratelimit, local cache", func(rs *redistest.Process, grpcPort int) (*serverProc, error) {
			return startEnvoyRL(ctx, e.dir, bin, append(envoyEnv(rs, grpcPort), "LOCAL_CACHE_SIZE_IN_BYTES="+strconv.Itoa(o.envoyLocalCache)), "envoy-rl-cache.log")
		}); err != nil {
			return err
		}
	}
	for _, compat := range []bool{false, true} {
		name, log := "ratescope", "ratescope-envoy.log"
		if compat {
			name, log = "ratescope --envoy-compat", "ratescope-envoy-compat.log"
		}
		if err := add(name, func(rs *redistest.Process, grpcPort int) (*serverProc, error) {
			// envoyproxy/ratelimit waits for Redis up to its REDIS_TIMEOUT,
			// 10 s by default: ratescope may wait as long, unless
			// --envoy-check-timeout says otherwise.
			env := append(envoyEnv(rs, grpcPort), "RATESCOPE_ENVOY_COMPAT="+strconv.FormatBool(compat), "RATESCOPE_CHECK_TIMEOUT="+o.envoyCheckTimeout.String())
			return startProc(ctx, e.dir, name, log, env, "serve", "--max-conns-per-client", "0")
		}); err != nil {
			return err
		}
	}

	var fresh atomic.Int64 // a flood's fresh users are never reused, on any target
	user := func(worker, i int) *rlsv3.RateLimitRequest {
		return rlsRequest("user", "u-"+strconv.Itoa((worker+i*o.conns)%o.keys))
	}
	flood := func(worker, i int) *rlsv3.RateLimitRequest {
		if i%floodFreshEvery == floodFreshEvery-1 {
			return rlsRequest("flood", "fresh-"+strconv.FormatInt(fresh.Add(1), 10))
		}
		return rlsRequest("flood", "hot-"+strconv.Itoa((worker+i*o.conns)%envoyFloodHotKeys))
	}
	workloads := []struct {
		name string
		req  func(worker, i int) *rlsv3.RateLimitRequest
	}{{"all allowed", user}, {"flood", flood}}
	for _, t := range targets {
		if err := fillEnvoyFlood(ctx, t); err != nil {
			return err
		}
		for _, w := range workloads {
			t.runs[w.name] = &rlsRun{}
			if _, err := driveRLS(ctx, t, o.conns, httpWarmup, w.req); err != nil {
				return fmt.Errorf("failed to warm up %s, %s: %w", t.name, w.name, err)
			}
		}
	}
	progress("  %d rounds of %s per server and workload", o.rounds, o.slice())
	for range o.rounds {
		for _, w := range workloads {
			for _, t := range targets {
				meter := newCPUMeter(t.proc, t.redis)
				res, err := driveRLS(ctx, t, o.conns, o.slice(), w.req)
				if err != nil {
					return fmt.Errorf("failed to measure %s, %s: %w", t.name, w.name, err)
				}
				r := t.runs[w.name]
				r.rates = append(r.rates, res.rate())
				r.cpus = append(r.cpus, meter.stop())
				r.ok, r.over, r.failed = r.ok+res.ok, r.over+res.over, r.failed+res.failed
			}
		}
	}

	rep := e.rep
	rep.line("")
	rep.line("## Envoy rate limit service: ratescope against envoyproxy/ratelimit")
	rep.line("")
	rep.line("envoyproxy/ratelimit built from its source (%s); every server reads the same file in its format (`RUNTIME_ROOT/ratelimit/config/bench.yaml`: `user` %s, `flood` %d per day), on a fresh redis-server of its own, and is called by %d goroutines over %d HTTP/2 connections with one descriptor per call, %s per server and workload after a %s warm-up. All allowed: %d users under a limit nobody reaches. Flood: %d %% of calls to %d users filled past their limit beforehand, the rest to users never seen. CPU per call is the server's and its redis-server's CPU time divided by the calls answered; any call answered with an error fails the phase. ratescope runs with a check timeout of %s (envoyproxy/ratelimit waits for Redis up to 10 s) and keeps its local deny cache on; envoyproxy/ratelimit runs without its local cache unless a row says so.",
		rev, "100000 per second", envoyFloodLimit, o.conns, envoyClientConns, o.duration, httpWarmup, o.keys, 100-100/floodFreshEvery, envoyFloodHotKeys, o.envoyCheckTimeout)
	rep.line("")
	rep.line("| server | workload | calls/s (median) | min–max | server µs/call | redis µs/call | server+redis µs/call | OK · OVER_LIMIT |")
	rep.line("|---|---|---:|---:|---:|---:|---:|---|")
	for _, w := range workloads {
		for _, t := range targets {
			r := t.runs[w.name]
			rate, cpu := median(r.rates), meanCPU(r.cpus)
			rep.line("| %s | %s | %.0f | %s | %s | %s | %s | %d · %d |", t.name, w.name, rate, spread("%.0f", r.rates),
				perCall(cpu.server, rate), perCall(cpu.redis, rate), perCall(cpu.server+cpu.redis, rate), r.ok, r.over)
		}
	}
	rep.line("")
	for _, w := range workloads {
		base := targets[0].runs[w.name]
		for _, t := range targets[1:] {
			r := t.runs[w.name]
			rate := ratios(r.rates, base.rates)
			cb, cr := meanCPU(base.cpus), meanCPU(r.cpus)
			rep.line("- %s, %s: **%.2f×** envoyproxy/ratelimit's calls/s (rounds %s), **%.2f×** its server+Redis CPU per call",
				w.name, t.name, median(rate), spread("%.2f", rate),
				((cr.server+cr.redis)/median(r.rates))/((cb.server+cb.redis)/median(base.rates)))
		}
	}
	return nil
}

// perCall is µs of CPU per call at rate calls/s from cores in use.
func perCall(cores, rate float64) string {
	if cores < 0 || rate <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", cores/rate*1e6)
}

func rlsRequest(key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: "bench",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}},
	}
}

// fillEnvoyFlood calls each hot user past its limit, so every later call on
// them is OVER_LIMIT; it fails if the limit is not where it should be.
func fillEnvoyFlood(ctx context.Context, t *rlsTarget) error {
	client := rlsv3.NewRateLimitServiceClient(t.conns[0])
	for k := range envoyFloodHotKeys {
		for i := range envoyFloodLimit + 1 {
			resp, err := client.ShouldRateLimit(ctx, rlsRequest("flood", "hot-"+strconv.Itoa(k)))
			if err != nil {
				return fmt.Errorf("failed to fill %s's flood users: %w", t.name, err)
			}
			want := rlsv3.RateLimitResponse_OK
			if i == envoyFloodLimit {
				want = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			if resp.GetOverallCode() != want {
				return fmt.Errorf("failed to fill %s's flood users: call %d of hot-%d answered %s, want %s", t.name, i+1, k, resp.GetOverallCode(), want)
			}
		}
	}
	return nil
}

// rlsResult is one run's outcome.
type rlsResult struct {
	took             time.Duration
	ok, over, failed int64
}

func (r rlsResult) rate() float64 { return float64(r.ok+r.over) / r.took.Seconds() }

// driveRLS calls t from workers goroutines, each one call at a time, for d
// (a call started before d ends is answered). An error answer ends the run
// with an error.
func driveRLS(ctx context.Context, t *rlsTarget, workers int, d time.Duration, mk func(worker, i int) *rlsv3.RateLimitRequest) (rlsResult, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	end := time.Now().Add(d)
	var (
		res      rlsResult
		firstErr error
		mu       sync.Mutex
		wg       sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		client := rlsv3.NewRateLimitServiceClient(t.conns[w%len(t.conns)])
		wg.Go(func() {
			var ok, over int64
			for i := 0; rctx.Err() == nil && time.Now().Before(end); i++ {
				resp, err := client.ShouldRateLimit(rctx, mk(w, i))
				if err != nil {
					if rctx.Err() == nil {
						mu.Lock()
						firstErr = errors.Join(firstErr, fmt.Errorf("%s: %w", t.name, err))
						mu.Unlock()
						cancel()
					}
					break
				}
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
					over++
				} else {
					ok++
				}
			}
			mu.Lock()
			res.ok, res.over = res.ok+ok, res.over+over
			mu.Unlock()
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	switch {
	case firstErr != nil:
		return res, firstErr
	case ctx.Err() != nil:
		return res, ctx.Err()
	case res.ok+res.over == 0:
		return res, errors.New("no call was answered")
	}
	return res, nil
}
