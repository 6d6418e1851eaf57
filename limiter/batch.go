package limiter

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batching defaults. A pipeline of 64 scripts keeps Redis busy for well under
// a millisecond; two in flight keep Redis busy while the next batch collects.
// Four made batches half the size under load for no more checks a second:
// most of what a check costs Redis and this process is per pipeline (its
// reads and writes) and per script call, so fewer, larger batches cost less
// (BENCHMARKS.md).
const (
	DefaultMaxBatch    = 64
	DefaultMaxInFlight = 2
)

// Option configures a Limiter.
type Option func(*Limiter)

// WithBatching sets how many checks one pipeline carries at most and how many
// pipelines may be in flight at once.
func WithBatching(maxBatch, maxInFlight int) Option {
	return func(l *Limiter) {
		l.batch = &batcher{rdb: l.rdb, maxBatch: max(1, maxBatch), maxInFlight: max(1, maxInFlight)}
	}
}

// WithoutBatching makes every check its own round trip (EVALSHA, EVAL on
// NOSCRIPT), as go-redis's Script.Run does.
func WithoutBatching() Option {
	return func(l *Limiter) { l.batch = nil }
}

// batcher coalesces concurrent checks into pipelines: group commit. A check
// joins the queue; if fewer than maxInFlight pipelines are running, a runner
// starts and sends what is queued at once. While pipelines are in flight, new
// checks collect and leave together in the next one. Nothing waits on a timer,
// so a lone check at low load is sent immediately, alone.
//
// Exactness does not depend on batching: each script still runs atomically in
// Redis, in queue order. Each caller waits for its own result or its own
// context, whichever comes first.
type batcher struct {
	rdb         rediser
	maxBatch    int
	maxInFlight int
	// replicas > 0 ends every pipeline with WAIT replicas (durable.go).
	replicas int

	mu       sync.Mutex
	queue    []*call
	inFlight int
}

type call struct {
	ctx context.Context
	// roundTrip bounds Redis's answer from when the call is sent; 0: none.
	roundTrip time.Duration
	// deadline is the call's: ctx's or, when sooner, roundTrip after it was
	// sent (bound). Zero: none.
	deadline time.Time
	script   *redis.Script
	keys     []string // all in one slot: the first names it
	args     []any
	res      []int64
	err      error
	done     chan struct{} // closed by finish
	finished atomic.Bool
}

// finish hands the caller its result, once: a pipeline's answer and the
// watchdog that gives up on it may both try.
func (c *call) finish(res []int64, err error) {
	if c.finished.CompareAndSwap(false, true) {
		c.res, c.err = res, err
		close(c.done)
	}
}

// errRoundTrip is a call's error when Redis did not answer within its round
// trip: context.DeadlineExceeded, as its context would say.
var errRoundTrip = fmt.Errorf("failed to hear from Redis within the round trip: %w", context.DeadlineExceeded)

// bound sets the call's deadline for a send at now.
func (c *call) bound(now time.Time) {
	c.deadline, _ = c.ctx.Deadline()
	if c.roundTrip > 0 {
		if rt := now.Add(c.roundTrip); c.deadline.IsZero() || rt.Before(c.deadline) {
			c.deadline = rt
		}
	}
}

// run queues one call of script on keys (the first names the node) and waits for it;
// Redis gets roundTrip from when the call's pipeline is sent (0: no bound
// but ctx's). The script is a decision script: it returns an array of
// integers whose first is 1 when it allowed the request (and recorded it).
func (b *batcher) run(ctx context.Context, roundTrip time.Duration, script *redis.Script, keys []string, args []any) ([]int64, error) {
	c := &call{ctx: ctx, roundTrip: roundTrip, script: script, keys: keys, args: args, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.inFlight < b.maxInFlight {
		b.inFlight++
		go b.drain()
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// drain sends batches until the queue is empty.
func (b *batcher) drain() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), b.maxBatch)
		batch := make([]*call, n)
		copy(batch, b.queue)
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.send(batch)
	}
}

// send runs one batch as a pipeline. Calls whose callers already gave up are
// not sent. The pipeline lives as long as the latest call's deadline, which
// counts each call's round trip from now: the time it waited in the queue
// is not Redis's.
func (b *batcher) send(batch []*call) {
	live := batch[:0]
	var deadline time.Time
	unbounded := false
	now := time.Now()
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.finish(nil, err)
			continue
		}
		live = append(live, c)
		c.bound(now)
		if c.deadline.IsZero() {
			unbounded = true
		} else if c.deadline.After(deadline) {
			deadline = c.deadline
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
		// A client that does not bound socket I/O by contexts would keep the
		// callers past their bounds: give up on them at the deadline.
		watchdog := time.AfterFunc(time.Until(deadline), func() {
			for _, c := range live {
				c.finish(nil, errRoundTrip)
			}
		})
		defer watchdog.Stop()
	}
	b.sendCalls(ctx, live)
}

// sendCalls runs calls in one pipeline — one per node when durable on a
// cluster — and hands each caller its result (finish).
func (b *batcher) sendCalls(ctx context.Context, calls []*call) {
	if groups := b.byNode(ctx, calls); groups == nil {
		_, single := b.rdb.(*redis.Client) // standalone, or Sentinel's master
		b.sendGroup(ctx, b.rdb, calls, single)
	} else {
		var wg sync.WaitGroup
		for _, g := range groups {
			wg.Go(func() { b.sendGroup(ctx, g.rdb, g.calls, false) })
		}
		wg.Wait()
	}
}

// sendGroup runs calls as one pipeline on rdb (a connection: what WAIT
// needs), the scripts Redis had not cached once more in full. single: rdb is
// one Redis, so any keys may share a script call (many.go); else only keys of
// one hash tag.
func (b *batcher) sendGroup(ctx context.Context, rdb pipeliner, calls []*call, single bool) {
	units := combine(calls, single)
	cmds, wait := b.pipeline(ctx, rdb, units, calls, false)
	var waits []*redis.IntCmd // each unit's WAIT, when durable
	if wait != nil {
		waits = make([]*redis.IntCmd, len(units))
		for i := range waits {
			waits[i] = wait
		}
	}
	var retry []unit
	var retryIdx []int
	for i, u := range units {
		if isNoScript(cmds[i].Err()) {
			retry, retryIdx = append(retry, u), append(retryIdx, i)
		}
	}
	if len(retry) > 0 {
		// The script was not cached (a restarted or failed-over Redis): it did
		// not run, so sending it again in full cannot count a request twice.
		again, wait := b.pipeline(ctx, rdb, retry, calls, true)
		for j, i := range retryIdx {
			cmds[i] = again[j]
			if wait != nil {
				waits[i] = wait
			}
		}
	}
	now := time.Now()
	for i, u := range units {
		var wait *redis.IntCmd
		if waits != nil {
			wait = waits[i]
		}
		u.finish(cmds[i], wait, b.replicas, now)
	}
}

// unit is one command of a pipeline: one call, or calls of one script sent
// as one call of its many variant.
type unit []*call

// combine puts calls into units: each script's calls together (only those of
// one hash tag unless single), in queue order within a unit. Units of
// different scripts may leave in another order than their calls came: such
// calls were in flight together, and either order is one they could take.
func combine(calls []*call, single bool) []unit {
	units := make([]unit, 0, len(calls))
	type unitKey struct {
		script *redis.Script
		tag    string
	}
	var index map[unitKey]int // by script and tag, when not single
	for _, c := range calls {
		if manyOf[c.script] == nil {
			units = append(units, unit{c})
			continue
		}
		at := -1
		if single { // few scripts a batch: look them up in place
			for i, u := range units {
				if u[0].script == c.script {
					at = i
					break
				}
			}
		} else {
			k := unitKey{c.script, hashTag(c.keys[0])}
			if i, ok := index[k]; ok {
				at = i
			} else {
				if index == nil {
					index = map[unitKey]int{}
				}
				index[k] = len(units)
			}
		}
		if at < 0 {
			units = append(units, unit{c})
		} else {
			units[at] = append(units[at], c)
		}
	}
	return units
}

// queue queues the unit's command on pipe.
func (u unit) queue(ctx context.Context, pipe redis.Pipeliner, full bool) *redis.Cmd {
	if len(u) == 1 {
		return queueScript(ctx, pipe, u[0].script, u[0].keys, u[0].args, full)
	}
	keys, args := manyArgs(u)
	return queueScript(ctx, pipe, manyOf[u[0].script], keys, args, full)
}

// finish hands each of the unit's callers its result from cmd, confirmed by
// wait (nil when not durable) when allowed; now is when the answer came.
func (u unit) finish(cmd *redis.Cmd, wait *redis.IntCmd, replicas int, now time.Time) {
	var res [][]int64
	errs := make([]error, len(u))
	if len(u) == 1 {
		r, err := cmd.Int64Slice()
		res, errs[0] = [][]int64{r}, err
	} else if v, err := cmd.Result(); err != nil {
		for i := range errs {
			errs[i] = err
		}
	} else if r, e, err := manyReplies(v, len(u)); err != nil {
		for i := range errs { // a reply that is not one per call: each call's error
			errs[i] = err
		}
	} else {
		res, errs = r, e
	}
	for i, c := range u {
		var r []int64
		if res != nil {
			r = res[i]
		}
		err := errs[i]
		if err != nil && !c.deadline.IsZero() && !now.Before(c.deadline) {
			// The socket's deadline was the call's: say so as its context would.
			err = fmt.Errorf("%w: %w", errRoundTrip, err)
		}
		if err == nil && len(r) > 0 && r[0] == 1 && wait != nil {
			err = confirmed(replicas, wait)
		}
		c.finish(r, err)
	}
}

// pipeliner is what a pipeline is sent on: the client, or one cluster node.
type pipeliner interface{ Pipeline() redis.Pipeliner }

// pipeline sends units in one pipeline, ended by WAIT when durable (nil
// otherwise; its timeout from calls, all of the group's); full sends each
// script's source (EVAL) instead of its hash.
func (b *batcher) pipeline(ctx context.Context, rdb pipeliner, units []unit, calls []*call, full bool) ([]*redis.Cmd, *redis.IntCmd) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(units))
	for i, u := range units {
		cmds[i] = u.queue(ctx, pipe, full)
	}
	var wait *redis.IntCmd
	if b.replicas > 0 {
		wait = redis.NewIntCmd(ctx, "wait", b.replicas, waitTimeout(calls).Milliseconds())
		_ = pipe.Process(ctx, wait)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return cmds, wait
}

// queueScript queues one run of a script on pipe: by its hash, or with full
// by its source (EVAL), for a Redis that has not cached it.
func queueScript(ctx context.Context, pipe redis.Pipeliner, s *redis.Script, keys []string, args []any, full bool) *redis.Cmd {
	if full {
		return s.Eval(ctx, pipe, keys, args...)
	}
	return s.EvalSha(ctx, pipe, keys, args...)
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
