package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
)

// The scripts phase (--scripts) measures what one decision of the log costs
// Redis itself, for the check script this tool was built with and for any
// other version of it given with --script NAME=FILE (the same arguments and
// reply: e.g. `git show <rev>:limiter/check.lua`), A/B in one run:
//
//   - Redis µs per decision: what INFO commandstats adds to EVALSHA's usec,
//     divided by its calls — the script's own run time, I/O excluded;
//   - redis-server CPU per decision: INFO cpu (user + sys, the whole process:
//     sockets, parsing, replies) divided by the decisions.
//
// At limits 10, 1,000 and 100,000, with one rule and two, three workloads:
// allowed (fresh logs filled to the limit, day-long windows: every log size
// from empty to the limit), denied (checks on those full logs) and steady
// (1 s windows over as many keys as keep each log about a quarter full at
// --script-rate, paced: every check evicts what slid out).
// Variants take turns within every round, each on keys of its own; ratios
// are each variant's figure over the first's, round by round.
//
// With --envoy-rl-bin (or --envoy-rl-src), envoyproxy/ratelimit's fixed
// window on the same redis-server is the bar: INCRBY + EXPIRE per
// descriptor, one descriptor per request and two.
var scriptLimits = []int{10, 1_000, 100_000}

// scriptVariant is one version of the check script.
type scriptVariant struct {
	name   string
	script *redis.Script
}

// scriptFigures accumulates one (case, workload, variant)'s rounds.
type scriptFigures struct {
	usec, cpu []float64 // µs per decision: EVALSHA's own, redis-server's CPU
	rate      []float64 // decisions/s
	allowed   int64
	denied    int64
}

// scriptCase is one policy shape: a limit, one rule or two.
type scriptCase struct {
	limit int
	rules int
}

func (c scriptCase) String() string {
	return fmt.Sprintf("limit %d, %d rule%s", c.limit, c.rules, plural(c.rules))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// policy is the case's policy for a workload: day-long windows for the
// allowed and denied workloads, 1 s (and 2 s) for the steady one.
func (c scriptCase) policy(steady bool) (limiter.Policy, error) {
	w1, w2 := "12h", "24h"
	if steady {
		w1, w2 = "1s", "2s"
	}
	s := fmt.Sprintf("s%d=%d/%s", c.limit, c.limit, w1)
	if c.rules == 2 {
		s += fmt.Sprintf(",%d/%s", min(c.limit*2, limiter.MaxLogLimit), w2)
	}
	return limiter.ParsePolicy(s)
}

// scriptVariants are the scripts to compare: each --script in order, then
// the one this tool was built with.
func scriptVariants(o options) ([]scriptVariant, error) {
	var vs []scriptVariant
	for _, spec := range o.scripts {
		name, path, _ := strings.Cut(spec, "=")
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("failed to read --script %s: %w", spec, err)
		}
		vs = append(vs, scriptVariant{name: name, script: redis.NewScript(string(src))})
	}
	return append(vs, scriptVariant{name: "this build", script: redis.NewScript(redisdata.CheckScript)}), nil
}

var scriptWorkloads = []string{"allowed", "denied", "steady"}

func measureScripts(ctx context.Context, e *env) error {
	o := e.o
	variants, err := scriptVariants(o)
	if err != nil {
		return err
	}
	workers := max(1, o.conns/o.pipeline)
	rdb, err := e.redisClient(workers + 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	for _, v := range variants {
		if err := v.script.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("failed to load script %s: %w", v.name, err)
		}
	}
	d := &scriptDriver{rdb: rdb, workers: workers, pipeline: o.pipeline, rate: o.scriptRate}

	var cases []scriptCase
	for _, l := range scriptLimits {
		cases = append(cases, scriptCase{l, 1}, scriptCase{l, 2})
	}
	figs := map[scriptCase]map[string][]*scriptFigures{}
	steadyKeys := map[scriptCase]int{}
	for _, c := range cases {
		figs[c] = map[string][]*scriptFigures{}
		for _, w := range scriptWorkloads {
			for range variants {
				figs[c][w] = append(figs[c][w], &scriptFigures{})
			}
		}
		long, err := c.policy(false)
		if err != nil {
			return err
		}
		steady, err := c.policy(true)
		if err != nil {
			return err
		}
		progress("  %s: %d rounds", c, o.rounds)
		for range o.rounds {
			for vi, v := range variants {
				prefix := fmt.Sprintf("scr-%s-%d-", uuid.NewString()[:8], vi)
				keys := max(1, o.scriptChecks/c.limit)
				f := figs[c]["allowed"][vi]
				if err := d.measure(ctx, f, v, long, prefix, keys, int64(keys*c.limit), 0); err != nil {
					return fmt.Errorf("%s, %s, allowed: %w", c, v.name, err)
				}
				if f.denied > 0 {
					return fmt.Errorf("%s, %s: %d checks denied while filling empty logs to the limit", c, v.name, f.denied)
				}
				if err := d.measure(ctx, figs[c]["denied"][vi], v, long, prefix, keys, int64(o.scriptChecks), 0); err != nil {
					return fmt.Errorf("%s, %s, denied: %w", c, v.name, err)
				}
				// At --script-rate, about a quarter of the limit per key
				// within the 1 s window (half within the second rule's 2 s).
				steadyKeys[c] = max(1, 4*o.scriptRate/c.limit)
				// A second's warm-up fills the windows, unmeasured.
				sf := &scriptFigures{}
				if err := d.measure(ctx, sf, v, steady, prefix+"s-", steadyKeys[c], 0, time.Second); err != nil {
					return fmt.Errorf("%s, %s, steady warm-up: %w", c, v.name, err)
				}
				if err := d.measure(ctx, figs[c]["steady"][vi], v, steady, prefix+"s-", steadyKeys[c], 0, o.slice()); err != nil {
					return fmt.Errorf("%s, %s, steady: %w", c, v.name, err)
				}
				if err := d.clear(ctx, prefix); err != nil {
					return err
				}
			}
		}
	}
	bar, err := envoyBar(ctx, e)
	if err != nil {
		return err
	}
	scriptReport(e, variants, cases, figs, steadyKeys, bar, workers)
	return nil
}

// scriptDriver runs one script from workers goroutines, pipeline calls at a
// time, as the limiter's batching sends them.
type scriptDriver struct {
	rdb      *redis.Client
	workers  int
	pipeline int
	rate     int // calls/s of a timed (steady) run
}

// measure runs v's script on keys prefix0 … prefix<keys-1> under p, n calls
// as fast as they go (round robin over the keys, so a fill of keys × limit
// reaches every limit exactly) or, with n = 0, for d at the driver's rate; and
// adds the round's figures to f.
func (s *scriptDriver) measure(ctx context.Context, f *scriptFigures, v scriptVariant, p limiter.Policy, prefix string, keys int, n int64, d time.Duration) error {
	args := func(i int64) ([]string, []any) {
		a := make([]any, 0, 3+2*len(p.Rules))
		a = append(a, 1, uuid.NewString(), redisdata.MaxEvict)
		for _, r := range p.Rules {
			a = append(a, r.Limit, r.WindowMs())
		}
		return []string{redisdata.LogKey(prefix+strconv.FormatInt(i%int64(keys), 10), p.Name)}, a
	}
	var next, allowed, denied atomic.Int64
	paced := n == 0
	if paced {
		n = 1 << 62
	}
	start := time.Now()
	call := func(ctx context.Context, _ int64) (int, error) {
		first := next.Add(int64(s.pipeline)) - int64(s.pipeline)
		m := min(int64(s.pipeline), n-first)
		if m <= 0 {
			return 0, errDone
		}
		if paced {
			time.Sleep(time.Until(start.Add(time.Duration(first) * time.Second / time.Duration(s.rate))))
		}
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, m)
		for j := range m {
			keys, a := args(first + j)
			cmds[j] = v.script.EvalSha(ctx, pipe, keys, a...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("failed to run script %s: %w", v.name, err)
		}
		for _, c := range cmds {
			res, err := c.Int64Slice()
			if err != nil || len(res) == 0 {
				return 0, fmt.Errorf("failed to read script %s's reply: %v %w", v.name, res, err)
			}
			if res[0] == 1 {
				allowed.Add(1)
			} else {
				denied.Add(1)
			}
		}
		return int(m), nil
	}
	before, err := readScriptCounters(ctx, s.rdb)
	if err != nil {
		return err
	}
	if d == 0 {
		d = 24 * time.Hour // until n calls are done
	}
	rate, err := forDuration(ctx, s.workers, d, call)
	if err != nil {
		return err
	}
	after, err := readScriptCounters(ctx, s.rdb)
	if err != nil {
		return err
	}
	calls := after.calls["evalsha"] - before.calls["evalsha"]
	if calls <= 0 {
		return fmt.Errorf("INFO commandstats counted no EVALSHA")
	}
	f.usec = append(f.usec, (after.usec["evalsha"]-before.usec["evalsha"])/calls)
	f.cpu = append(f.cpu, (after.cpu-before.cpu)*1e6/calls)
	f.rate = append(f.rate, rate)
	f.allowed += allowed.Load()
	f.denied += denied.Load()
	return nil
}

// clear deletes the keys a round of one variant wrote.
func (s *scriptDriver) clear(ctx context.Context, prefix string) error {
	return unlinkPrefix(ctx, s.rdb, prefix)
}

// unlinkPrefix deletes the logs of every client key that starts with prefix:
// a measured round's keys, so that rounds do not pile up in Redis's memory.
func unlinkPrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, "rate_limit:{"+prefix+"*", 1000).Iterator()
	var batch []string
	unlink := func() error {
		if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
			return fmt.Errorf("failed to delete the measured keys: %w", err)
		}
		batch = batch[:0]
		return nil
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := unlink(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("failed to list the measured keys: %w", err)
	}
	if len(batch) > 0 {
		return unlink()
	}
	return nil
}

// scriptCounters are INFO figures of the Redis under test: calls and usec per
// command (commandstats), and the process's CPU seconds (user + sys).
type scriptCounters struct {
	calls, usec map[string]float64
	cpu         float64
}

func readScriptCounters(ctx context.Context, rdb *redis.Client) (scriptCounters, error) {
	info, err := rdb.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return scriptCounters{}, fmt.Errorf("failed to read INFO: %w", err)
	}
	c := scriptCounters{calls: map[string]float64{}, usec: map[string]float64{}}
	for line := range strings.SplitSeq(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if cmd, ok := strings.CutPrefix(name, "cmdstat_"); ok {
			for field := range strings.SplitSeq(value, ",") {
				k, v, _ := strings.Cut(field, "=")
				x, _ := strconv.ParseFloat(v, 64)
				switch k {
				case "calls":
					c.calls[cmd] = x
				case "usec":
					c.usec[cmd] = x
				}
			}
			continue
		}
		if name == "used_cpu_user" || name == "used_cpu_sys" {
			x, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return scriptCounters{}, fmt.Errorf("failed to read INFO %s: %w", name, err)
			}
			c.cpu += x
		}
	}
	return c, nil
}
