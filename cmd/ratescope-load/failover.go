package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
)

// The failover phase (--failover): a master crash under load, as an operator
// without persistence would see it — SIGKILL the master, bring it back empty
// failoverRestart later — on a Sentinel deployment (redistest), and what it
// costs: requests admitted over the limit, decisions the new master forgot,
// fail-mode answers; beside it, what durable decisions cost in latency and
// throughput on a healthy deployment.
const (
	failoverPolicy  = "api=50/10s"
	failoverLimit   = 50
	failoverWindow  = 10 * time.Second
	failoverKeys    = 10
	failoverWarmup  = 5 * time.Second
	failoverSettle  = 20 * time.Second // load after the sentinels moved: two windows
	failoverGiveUp  = 30 * time.Second // for the sentinels to move or checks to recover
	saturatePolicy  = "sat=100000/1s"
	saturateConns   = 64
	saturateKeys    = 10000
	saturateTime    = 3 * time.Second
	forgottenWithin = 5 * time.Second // decisions before the kill looked up on the new master
)

// answer is one check of the open-loop load.
type answer struct {
	key     int
	status  int // 0: no answer (transport error)
	allowed bool
	nowMs   int64
	id      string
	sent    time.Time
	took    time.Duration
}

// failoverResult is one run.
type failoverResult struct {
	sat        httpResult // saturation before the kill
	answers    []answer
	killedAt   time.Time
	movedAfter time.Duration // kill → every sentinel names the new master; 0: they never moved
	lastFail   time.Duration // kill → the last fail-mode answer (sent then)
	allowedAt  time.Duration // kill → the first allowed answer sent after it; 0: none
	overs      int
	overKeys   int
	failMode   int // 503 answers
	forgotten  int // allowed in the last forgottenWithin before the kill, absent on the new master
	lookedUp   int
	oldScripts int64 // scripts the restarted old master received
	switches   int   // failovers the sentinels made in the run (more than one: the load stalled a node)
	steady     latencies
}

// failoverVariant is what one row of the report varies.
type failoverVariant struct {
	replicas int
	durable  int
}

func measureFailover(ctx context.Context, e *env) error {
	o := e.o
	rep := e.rep
	rep.line("")
	rep.line("## Failover under load (Sentinel)")
	rep.line("")
	rep.line("Each run: a master with replicas and 3 sentinels (down-after 1 s, failover-timeout 5 s; Redis defaults otherwise, no persistence), one ratescope server on the Sentinel URL (check timeout 150 ms, fail closed), %d checks/s open-loop on `%s` over %d keys. After %v, SIGKILL the master; %v later start it again, empty, on its port; keep the load until the sentinels have moved and %v more. A check the new master would allow but cannot confirm on its replicas is still recorded: it fills the window, and the load sees denials until the entries slide out.",
		o.failoverRate, failoverPolicy, failoverKeys, failoverWarmup, o.failoverRestart, failoverSettle)
	rep.line("Over the limit: allowed answers beyond %d in any %v sliding window of one key, on the decisions' own clock (greedy, earliest kept). Forgotten: checks answered allowed in the %v before the kill whose entries the master lacks once the sentinels have moved. Saturation: %d connections for %v on `%s` over %d keys, all allowed, before the kill.",
		failoverLimit, failoverWindow, forgottenWithin, saturateConns, saturateTime, saturatePolicy, saturateKeys)
	rep.line("")
	rep.line("| replicas | --durable-replicas | run | over the limit (keys) | forgotten | fail-mode answers | kill → sentinels moved (failovers) | kill → first allowed answer | kill → last fail-mode answer | scripts to the restarted master | p50 / p99 at %d/s | saturation: checks/s, p50 / p99 (503s) |", o.failoverRate)
	rep.line("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, replicas := range o.failoverReplicas {
		for _, durable := range []int{0, 1} {
			v := failoverVariant{replicas: replicas, durable: durable}
			for run := 1; run <= o.failoverRuns; run++ {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				progress("failover: %d replica(s), --durable-replicas %d, run %d…", replicas, durable, run)
				r, err := failoverRun(ctx, e, v)
				if err != nil {
					return err
				}
				moved, allowed := "never (no failover)", "none"
				if r.movedAfter > 0 {
					moved = fmt.Sprintf("%v (%d)", r.movedAfter.Round(10*time.Millisecond), r.switches)
				}
				if r.allowedAt > 0 {
					allowed = r.allowedAt.Round(10 * time.Millisecond).String()
				}
				s := r.steady.sorted()
				sat := r.sat.lat.sorted()
				rep.line("| %d | %d | %d | **%d** (%d) | %d of %d | %d | %s | %s | %s | %d | %s / %s | %.0f, %s / %s (%d) |",
					replicas, durable, run, r.overs, r.overKeys, r.forgotten, r.lookedUp, r.failMode, moved,
					allowed, r.lastFail.Round(10*time.Millisecond), r.oldScripts, ms(s.pct(.5)), ms(s.pct(.99)),
					r.sat.rate(), ms(sat.pct(.5)), ms(sat.pct(.99)), r.sat.byStatus[http.StatusServiceUnavailable])
			}
		}
	}
	return nil
}

func failoverRun(ctx context.Context, e *env, v failoverVariant) (failoverResult, error) {
	var r failoverResult
	dir, err := os.MkdirTemp(e.dir, "failover-")
	if err != nil {
		return r, fmt.Errorf("failed to create a folder: %w", err)
	}
	d, err := redistest.LaunchDeployment(ctx, dir, redistest.DeploymentConfig{Replicas: v.replicas})
	if err != nil {
		return r, err
	}
	defer d.Stop()
	srv, err := startServer(ctx, dir, d.URL, "--policy", failoverPolicy, "--policy", saturatePolicy,
		"--durable-replicas", fmt.Sprint(v.durable))
	if err != nil {
		return r, err
	}
	defer srv.stop()
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	base := "http://" + srv.addr

	r.sat = saturate(ctx, client, base)

	old, err := d.WaitMaster(ctx, failoverGiveUp, nil)
	if err != nil {
		return r, err
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	rec := &recorder{}
	var loadDone sync.WaitGroup
	loadDone.Go(func() { openLoop(loadCtx, client, base, e.o.failoverRate, rec) })
	stop := func() { stopLoad(); loadDone.Wait() }

	if err := sleep(ctx, failoverWarmup); err != nil {
		stop()
		return r, err
	}
	r.killedAt = time.Now()
	d.Node(old).Stop()
	if err := sleep(ctx, e.o.failoverRestart); err != nil {
		stop()
		return r, err
	}
	restartErr := d.Node(old).Restart(ctx)
	newMaster, err := d.WaitMaster(ctx, failoverGiveUp, func(a string) bool { return a != old })
	if err == nil {
		r.movedAfter = time.Since(r.killedAt)
	}
	// The decisions of the last seconds before the kill, looked up on the
	// master now (the promoted one; the restarted one when there was no
	// failover), before they slide out of their windows.
	before := beforeKill(rec.all(), r.killedAt)
	master := newMaster
	if master == "" {
		master = old
	}
	r.lookedUp, r.forgotten = lookUp(ctx, master, before)

	if err := sleep(ctx, failoverSettle); err != nil {
		stop()
		return r, err
	}
	stop()
	if restartErr != nil {
		return r, restartErr
	}
	r.answers = rec.all()
	r.switches = d.Switches()
	if r.oldScripts, err = redistest.ScriptCalls(ctx, old); err != nil {
		return r, err
	}
	analyse(&r)
	return r, nil
}

// saturate sends checks from saturateConns goroutines, each one at a time,
// for saturateTime: all allowed, the path that writes (and waits for the
// replicas). Answers of every status count; the report names the 503s.
func saturate(ctx context.Context, client *http.Client, base string) httpResult {
	rctx, cancel := context.WithTimeout(ctx, saturateTime)
	defer cancel()
	var mu sync.Mutex
	res := httpResult{byStatus: map[int]int{}}
	var wg sync.WaitGroup
	start := time.Now()
	for w := range saturateConns {
		wg.Go(func() {
			for i := 0; rctx.Err() == nil; i++ {
				t0 := time.Now()
				status := 0
				resp, err := client.Post(fmt.Sprintf("%s/api/v1/check?policy=sat&key=sat-%d", base, (w+i*saturateConns)%saturateKeys), "", nil)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				res.lat = append(res.lat, time.Since(t0))
				res.byStatus[status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	return res
}

// recorder keeps the load's answers.
type recorder struct {
	mu      sync.Mutex
	answers []answer
}

func (r *recorder) add(a answer) {
	r.mu.Lock()
	r.answers = append(r.answers, a)
	r.mu.Unlock()
}

func (r *recorder) all() []answer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.answers)
}

// openLoop sends rate checks a second, each on its schedule whether or not
// earlier ones were answered, on failoverKeys keys in turn, until ctx ends.
func openLoop(ctx context.Context, client *http.Client, base string, rate int, rec *recorder) {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			return
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rec.add(check(client, base, i%failoverKeys))
		})
	}
}

func check(client *http.Client, base string, key int) answer {
	a := answer{key: key, sent: time.Now()}
	resp, err := client.Post(fmt.Sprintf("%s/api/v1/check?policy=api&key=fo-%d", base, key), "", nil)
	if err != nil {
		a.took = time.Since(a.sent)
		return a
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.took, a.status = time.Since(a.sent), resp.StatusCode
	var v struct {
		Allowed bool   `json:"allowed"`
		NowMs   int64  `json:"nowMs"`
		ID      string `json:"id"`
	}
	if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &v) == nil {
		a.allowed, a.nowMs, a.id = v.Allowed, v.NowMs, v.ID
	}
	return a
}

func beforeKill(all []answer, killed time.Time) []answer {
	var out []answer
	for _, a := range all {
		if a.allowed && a.sent.Before(killed) && killed.Sub(a.sent) < forgottenWithin {
			out = append(out, a)
		}
	}
	return out
}

// lookUp asks the master at addr for each answer's entry: how many were
// looked up and how many it lacks.
func lookUp(ctx context.Context, addr string, as []answer) (looked, missing int) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	pipe := c.Pipeline()
	cmds := make([]*redis.FloatCmd, len(as))
	for i, a := range as {
		cmds[i] = pipe.ZScore(ctx, redisdata.LogKey(fmt.Sprintf("fo-%d", a.key), "api"), a.id)
	}
	_, _ = pipe.Exec(ctx)
	for _, cmd := range cmds {
		looked++
		if cmd.Err() != nil {
			missing++
		}
	}
	return looked, missing
}

// analyse counts admissions over the limit per key, fail-mode answers, the
// recovery time and the latency before the kill.
func analyse(r *failoverResult) {
	byKey := map[int][]int64{}
	for _, a := range r.answers {
		if a.sent.Before(r.killedAt) && a.status != 0 {
			r.steady = append(r.steady, a.took)
		}
		if a.allowed {
			byKey[a.key] = append(byKey[a.key], a.nowMs)
		}
		if a.status == http.StatusServiceUnavailable || a.status == 0 {
			r.failMode++
			r.lastFail = max(r.lastFail, a.sent.Sub(r.killedAt))
		}
		if after := a.sent.Sub(r.killedAt); a.allowed && after > 0 && (r.allowedAt == 0 || after < r.allowedAt) {
			r.allowedAt = after
		}
	}
	for _, times := range byKey {
		if n := overLimit(times, failoverLimit, failoverWindow.Milliseconds()); n > 0 {
			r.overs += n
			r.overKeys++
		}
	}
}

// overLimit counts the admissions beyond limit in any window of windowMs
// (an entry at t counts in windows (t-windowMs, t]), keeping the earliest.
func overLimit(times []int64, limit int, windowMs int64) int {
	slices.Sort(times)
	var kept []int64
	over := 0
	for _, t := range times {
		i, _ := slices.BinarySearch(kept, t-windowMs+1)
		if len(kept)-i >= limit {
			over++
			continue
		}
		kept = append(kept, t)
	}
	return over
}
