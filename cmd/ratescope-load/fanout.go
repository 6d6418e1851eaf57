package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// fanServer is a server the fan-out phase measures: ratescope, or the reference.
type fanServer struct {
	name  string
	about string // for the report
	start func(ctx context.Context, e *env) (*serverProc, error)
}

func fanServers(o options) []fanServer {
	out := []fanServer{{
		name:  "ratescope",
		about: fmt.Sprintf("`--policy %s --tick-interval %s`, on the Redis above", fanPolicy, o.tickInterval),
		start: func(ctx context.Context, e *env) (*serverProc, error) {
			return startServer(ctx, e.dir, e.redisURL, "--policy", fanPolicy, "--tick-interval", o.tickInterval.String())
		},
	}}
	if !o.skipReference {
		out = append(out, fanServer{
			name:  "reference",
			about: fmt.Sprintf("a minimal coder/websocket server in coder/websocket's chat example's shape, the same tick to every viewer every %s, no Redis (reference.go)", o.tickInterval),
			start: func(ctx context.Context, e *env) (*serverProc, error) {
				return startReference(ctx, e.dir, "--tick-interval", o.tickInterval.String())
			},
		})
	}
	return out
}

// fanResult is one server's fan-out run with some number of viewers.
type fanResult struct {
	dialTook           time.Duration
	idleCPU, cpu       cpuUse
	before, after, end map[string]float64
	t                  timing
	ended              int64
	endedWhy           string
}

func (r fanResult) lastP99() time.Duration { return r.t.last.sorted().pct(.99) }

func (r fanResult) perViewer(metric string, n int) float64 {
	return (r.after[metric] - r.before[metric]) / float64(n)
}

// measureFanOut measures, for each --viewers count, the floor, then ratescope and
// the reference server one after the other (which goes first alternates from one
// count to the next), and reports ratescope's decision → every viewer p99 as a
// ratio to the reference's.
func measureFanOut(ctx context.Context, e *env) error {
	o := e.o
	type row struct {
		n      int
		floor  latencies
		byName map[string]fanResult
	}
	var rows []row
	for i, n := range o.viewers {
		progress("  the floor: one frame to %d raw TCP sockets, %d times", n, floorRounds)
		floor, err := measureFloor(ctx, e, n)
		if err != nil {
			return fmt.Errorf("the floor: %w", err)
		}
		r := row{n: n, floor: floor, byName: map[string]fanResult{}}
		servers := fanServers(o)
		if i%2 == 1 {
			slices.Reverse(servers)
		}
		for _, s := range servers {
			progress("  %s, %d viewers", s.name, n)
			res, err := fanOutOnce(ctx, e, s, n)
			if err != nil {
				return fmt.Errorf("%s with %d viewers: %w", s.name, n, err)
			}
			r.byName[s.name] = res
		}
		e.rep.fanOutSection(o, n, floor, servers, r.byName)
		rows = append(rows, r)
	}

	rep := e.rep
	rep.line("")
	rep.line("## WebSocket fan-out: ratescope ÷ the reference server")
	rep.line("")
	rep.line("Check → the last viewer's decision, p99 over %d checks; the floor's p99 over %d rounds. Target: ratescope ≤ 1.2 × the reference at 1,000 and 2,000 viewers.", o.checks, floorRounds)
	rep.line("")
	rep.line("| viewers | ratescope p99 | reference p99 | ratio | floor p99 | verdict |")
	rep.line("|---:|---:|---:|---:|---:|---|")
	for _, r := range rows {
		rs := r.byName["ratescope"]
		refCell, ratioCell, verdict := "–", "–", "no reference run"
		if ref, ok := r.byName["reference"]; ok && ref.lastP99() == 0 {
			verdict = "the reference delivered nothing"
		} else if ok {
			ratio := float64(rs.lastP99()) / float64(ref.lastP99())
			refCell, ratioCell = ms(ref.lastP99()), fmt.Sprintf("%.2f", ratio)
			verdict = atMost(ratio, 1.2)
			if r.n != 1000 && r.n != 2000 {
				verdict = "(the target is for 1,000 and 2,000)"
			}
		}
		rep.line("| %d | %s | %s | %s | %s | %s |", r.n, ms(rs.lastP99()), refCell, ratioCell, ms(r.floor.sorted().pct(.99)), verdict)
	}
	return nil
}

// fanOutOnce connects n viewers to one window of a fresh server process, measures
// the server's memory per idle viewer, then times --checks checks from the moment
// each is sent until every viewer has its decision.
func fanOutOnce(ctx context.Context, e *env, s fanServer, n int) (fanResult, error) {
	var res fanResult
	srv, err := s.start(ctx, e)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	if err := sleep(ctx, settle); err != nil {
		return res, err
	}
	if res.before, err = srv.metrics(mHeap, mRSS, mGoroutines); err != nil {
		return res, err
	}

	key := fmt.Sprintf("fan-%d", time.Now().UnixNano())
	vctx, cancel := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer func() { cancel(); readers.Wait() }()
	c := &crowd{viewers: make([]*viewer, n)}
	dialStart := time.Now()
	if err := c.connect(vctx, "ws://"+srv.addr+"/ws?policy=fan&key="+key, &readers); err != nil {
		return res, err
	}
	res.dialTook = time.Since(dialStart)
	progress("    connected in %s", res.dialTook.Round(time.Millisecond))
	idleMeter := newCPUMeter(srv, e.redis)
	if err := sleep(ctx, idle); err != nil {
		return res, err
	}
	res.idleCPU = idleMeter.stop()
	if res.after, err = srv.metrics(mHeap, mRSS, mGoroutines, mViewers); err != nil {
		return res, err
	}

	meter := newCPUMeter(srv, e.redis)
	if res.t, err = c.timeChecks(ctx, e.o, "http://"+srv.addr+"/api/v1/check?policy=fan&key="+key); err != nil {
		return res, err
	}
	res.cpu = meter.stop()
	if res.end, err = srv.metrics(mDropped, mViewers); err != nil {
		return res, err
	}
	res.ended, res.endedWhy = c.ended.Load(), c.reasons()
	return res, nil
}

// fanOutSection reports one viewer count, the servers side by side.
func (rep *report) fanOutSection(o options, n int, floor latencies, servers []fanServer, byName map[string]fanResult) {
	rep.line("")
	rep.line("## WebSocket fan-out: %d viewers on one window", n)
	rep.line("")
	rep.line("coder/websocket clients in the load tool's process, each reading its stream continuously; each server in its own process, measured one after the other in this order:")
	rep.line("")
	for _, s := range servers {
		rep.line("- %s: %s", s.name, s.about)
	}
	rep.line("")
	rep.line("%d checks, one at a time, at least %s apart; each is timed from just before its POST until a viewer has read the decision with its id.", o.checks, o.checkInterval)
	rep.line("")
	rep.line("| check → decision | p50 | p90 | p99 | max |")
	rep.line("|---|---:|---:|---:|---:|")
	for _, s := range servers {
		r := byName[s.name]
		rep.line("| %s: the last viewer to get it (one value per check) | %s |", s.name, r.t.last.cells())
		rep.line("| %s: any viewer (every delivery, %d of them) | %s |", s.name, len(r.t.each), r.t.each.cells())
	}
	rep.line("| the floor: a %d-byte write to each of %d plain loopback TCP sockets (a goroutine each), read by another process; no WebSocket, no server (%d rounds) | %s |", floorFrame, n, floorRounds, floor.sorted().cells())
	rep.line("")
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.name
	}
	rep.line("| measure | %s |", strings.Join(names, " | "))
	rep.line("|---|%s", strings.Repeat("---|", len(servers)))
	row := func(measure string, cell func(r fanResult) string) {
		cells := make([]string, len(servers))
		for i, s := range servers {
			cells[i] = cell(byName[s.name])
		}
		rep.line("| %s | %s |", measure, strings.Join(cells, " | "))
	}
	row("connected in", func(r fanResult) string {
		return fmt.Sprintf("%s (%.0f viewers/s, %d dialers)", r.dialTook.Round(time.Millisecond), float64(n)/r.dialTook.Seconds(), dialers)
	})
	row("viewers counted idle / after the checks", func(r fanResult) string {
		return fmt.Sprintf("%.0f / %.0f", r.after[mViewers], r.end[mViewers])
	})
	row("checks timed / answered without a decision", func(r fanResult) string {
		return fmt.Sprintf("%d / %d%s", len(r.t.last), o.checks-len(r.t.last), statusCounts(r.t.undecided))
	})
	row("deliveries missing after "+deliveryTimeout.String(), func(r fanResult) string {
		return fmt.Sprintf("%d of %d", r.t.missing, len(r.t.last)*n)
	})
	row("viewers dropped as slow (`"+mDropped+"`)", func(r fanResult) string { return fmt.Sprintf("%.0f", r.end[mDropped]) })
	row("viewers whose stream ended early (client side)", func(r fanResult) string { return fmt.Sprintf("%d%s", r.ended, r.endedWhy) })
	row("server heap in use per idle viewer", func(r fanResult) string {
		return fmt.Sprintf("%.1f KB (%.1f → %.1f MB)", r.perViewer(mHeap, n)/1024, r.before[mHeap]/1e6, r.after[mHeap]/1e6)
	})
	row("server RSS per idle viewer", func(r fanResult) string {
		return fmt.Sprintf("%.1f KB (%.1f → %.1f MB)", r.perViewer(mRSS, n)/1024, r.before[mRSS]/1e6, r.after[mRSS]/1e6)
	})
	row("server goroutines per viewer", func(r fanResult) string { return fmt.Sprintf("%.2f", r.perViewer(mGoroutines, n)) })
	rep.line("")
	for _, s := range servers {
		r := byName[s.name]
		rep.line("- %s, CPU with the viewers idle: %s", s.name, r.idleCPU)
		rep.line("- %s, CPU while timing the checks: %s", s.name, r.cpu)
	}
	rs, ok := byName["ratescope"]
	if !ok {
		return
	}
	rep.line("- ratescope's memory per idle viewer ≤ 64 KB: heap %s, RSS %s", atMost(rs.perViewer(mHeap, n)/1024, 64), atMost(rs.perViewer(mRSS, n)/1024, 64))
	switch {
	case len(rs.t.last) == 0:
		rep.line("- ratescope decided no check, so no delivery was timed")
	case n >= 10000:
		rep.line("- at %d viewers, ratescope's last viewer p99 is %s beside the floor's %s (the issue #6 target: 100 ms)", n, ms(rs.lastP99()), ms(floor.sorted().pct(.99)))
	}
}
