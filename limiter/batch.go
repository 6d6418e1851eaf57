package limiter

import (
	"context"
	"strings"
	"sync"
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

	mu       sync.Mutex
	queue    []*call
	inFlight int
}

type call struct {
	ctx    context.Context
	script *redis.Script
	key    string
	args   []any
	res    []int64
	err    error
	done   chan struct{}
}

// run queues one call of script, whose single key is key, and waits for it.
// Any script that returns an array of integers fits.
func (b *batcher) run(ctx context.Context, script *redis.Script, key string, args []any) ([]int64, error) {
	c := &call{ctx: ctx, script: script, key: key, args: args, done: make(chan struct{})}
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
// not sent. The pipeline lives as long as the latest caller's deadline.
func (b *batcher) send(batch []*call) {
	live := batch[:0]
	var deadline time.Time
	unbounded := false
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			close(c.done)
			continue
		}
		live = append(live, c)
		if d, ok := c.ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
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
	}

	cmds := b.pipeline(ctx, live, false)
	var retry []*call
	var retryIdx []int
	for i, c := range live {
		if isNoScript(cmds[i].Err()) {
			retry, retryIdx = append(retry, c), append(retryIdx, i)
		}
	}
	if len(retry) > 0 {
		// The script was not cached (a restarted or failed-over Redis): it did
		// not run, so sending it again in full cannot count a request twice.
		again := b.pipeline(ctx, retry, true)
		for j, i := range retryIdx {
			cmds[i] = again[j]
		}
	}
	for i, c := range live {
		c.res, c.err = cmds[i].Int64Slice()
		close(c.done)
	}
}

func (b *batcher) pipeline(ctx context.Context, calls []*call, full bool) []*redis.Cmd {
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = queueScript(ctx, pipe, c.script, c.key, c.args, full)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return cmds
}

// queueScript queues one run of a single-key script on pipe: by its hash, or
// with full by its source (EVAL), for a Redis that has not cached it.
func queueScript(ctx context.Context, pipe redis.Pipeliner, s *redis.Script, key string, args []any, full bool) *redis.Cmd {
	if full {
		return s.Eval(ctx, pipe, []string{key}, args...)
	}
	return s.EvalSha(ctx, pipe, []string{key}, args...)
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
