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
// a millisecond; a few pipelines in flight keep the connection pool and Redis
// busy while the next batch collects.
const (
	DefaultMaxBatch    = 64
	DefaultMaxInFlight = 4
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
		b.sendGroup(ctx, b.rdb, calls)
	} else {
		var wg sync.WaitGroup
		for _, g := range groups {
			wg.Go(func() { b.sendGroup(ctx, g.rdb, g.calls) })
		}
		wg.Wait()
	}
}

// sendGroup runs calls as one pipeline on rdb (a connection: what WAIT
// needs), the scripts Redis had not cached once more in full.
func (b *batcher) sendGroup(ctx context.Context, rdb pipeliner, calls []*call) {
	cmds, wait := b.pipeline(ctx, rdb, calls, false)
	var waits []*redis.IntCmd // each call's WAIT, when durable
	if wait != nil {
		waits = make([]*redis.IntCmd, len(calls))
		for i := range waits {
			waits[i] = wait
		}
	}
	var retry []*call
	var retryIdx []int
	for i, c := range calls {
		if isNoScript(cmds[i].Err()) {
			retry, retryIdx = append(retry, c), append(retryIdx, i)
		}
	}
	if len(retry) > 0 {
		// The script was not cached (a restarted or failed-over Redis): it did
		// not run, so sending it again in full cannot count a request twice.
		again, wait := b.pipeline(ctx, rdb, retry, true)
		for j, i := range retryIdx {
			cmds[i] = again[j]
			if wait != nil {
				waits[i] = wait
			}
		}
	}
	now := time.Now()
	for i, c := range calls {
		res, err := cmds[i].Int64Slice()
		if err != nil && !c.deadline.IsZero() && !now.Before(c.deadline) {
			// The socket's deadline was the call's: say so as its context would.
			err = fmt.Errorf("%w: %w", errRoundTrip, err)
		}
		if err == nil && len(res) > 0 && res[0] == 1 && waits != nil {
			err = confirmed(b.replicas, waits[i])
		}
		c.finish(res, err)
	}
}

// pipeliner is what a pipeline is sent on: the client, or one cluster node.
type pipeliner interface{ Pipeline() redis.Pipeliner }

// pipeline sends calls in one pipeline, ended by WAIT when durable (nil
// otherwise); full sends each script's source (EVAL) instead of its hash.
func (b *batcher) pipeline(ctx context.Context, rdb pipeliner, calls []*call, full bool) ([]*redis.Cmd, *redis.IntCmd) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = queueScript(ctx, pipe, c.script, c.keys, c.args, full)
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
