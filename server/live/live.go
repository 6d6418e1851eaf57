// Package live is ratescope's live view (SPEC §4): it feeds every viewer of a window
// the limiter's clock, the window's snapshots, and the decisions, resets, races,
// refunds and settles of every instance, which travel between instances through Redis Pub/Sub.
//
// One file per concern: events.go takes events in, clock.go reads Redis's clock,
// overrides.go follows the per-client overrides of watched windows,
// snapshots.go reads windows (turns.go for large audiences, budget.go keeps the
// reads within a budget, reads.go shares them), presence.go counts viewers across
// instances, bus.go is the Redis Pub/Sub bridge, stream.go serves one viewer's
// WebSocket, writers.go writes every viewer's frames with a few goroutines, and messages.go defines every message once — but the decision message, which lives with the bus
// protocol in package livebus, so Go services publish the same one. Fan-out itself is
// the hub's (live/hub). The package knows nothing of the HTTP server: what it uses
// comes in through Deps.
package live

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live/hub"
)

// Window names one watched log: a client key under a policy. It is the hub's topic
// inside the process; only on the Redis wire does it become "policy|key".
type Window = bus.Window

// rediser is what the live view needs of Redis, so a Client, a ClusterClient or a
// Ring all fit.
type rediser interface {
	bus.Client // Publish and Subscribe
	Time(ctx context.Context) *redis.TimeCmd
}

// Deps is everything the live view uses.
type Deps struct {
	Redis rediser
	// ReadWindows reads windows without consuming them, many in one round
	// trip (the limiter's Windows).
	ReadWindows func(ctx context.Context, ws []limiter.WindowOf) ([]limiter.Window, []error)
	// Policy looks a policy up by name; policies may change while the server runs.
	Policy func(name string) (limiter.Policy, bool)
	// Resolve is the policy in force for key under p: p with the rules of
	// the per-client override that applies, and that override, or p itself
	// and nil. Viewers see the window under those rules (Override). Nil:
	// no overrides.
	Resolve func(key string, p limiter.Policy) (limiter.Policy, *Override)
	// LabRequests reads a lab's recent requests, oldest first, for a viewer
	// that joins; nil sends none.
	LabRequests func(ctx context.Context, lab string) ([]LabResult, error)
	// Instance names this server process to viewers and to other instances.
	Instance string
	// TickInterval is the fastest rate at which viewers get the clock.
	TickInterval time.Duration
	// SnapshotBudget is how many window entries a second snapshots may read
	// from Redis (DefaultSnapshotBudget); 0: no budget.
	SnapshotBudget int
	// CheckTimeout bounds the live view's Redis calls, but the clock's reads
	// and the periodic snapshots' batches, which may take a second: one late
	// answer from a busy Redis is not an outage.
	CheckTimeout time.Duration
	// Writers is how many goroutines write viewers' frames at once
	// (writers.go); 0: GOMAXPROCS.
	Writers int
	Log     *slog.Logger
	Metrics Metrics
}

// Metrics are the figures the live view keeps; nil fields are not kept.
type Metrics struct {
	Viewers          Gauge   // viewers connected to this instance
	DroppedSlow      Counter // viewers disconnected because they fell behind
	PubSubDropped    Counter // events not sent to other instances: the publish queue was full
	PubSubReconnects Counter // Pub/Sub subscriptions started over after a failure
	PublishErrors    Counter // failed or timed-out PUBLISH calls
}

// Gauge and Counter are the parts of Prometheus's types the live view uses.
type (
	Gauge   interface{ Set(float64) }
	Counter interface{ Inc() }
)

type noMetric struct{}

func (noMetric) Set(float64) {}
func (noMetric) Inc()        {}

// Kinds of "latest" message (hub.PublishLatest): states a newer one supersedes,
// so a busy viewer gets the newest instead of a backlog. Decisions, resets and races
// are queued, never superseded.
const (
	kindTick hub.Kind = iota
	kindViewers
	kindSnapshot
	kindStatus
	kindOverview
	kindOverride
)

// View is the live view of one server process.
type View struct {
	d   Deps
	hub *hub.Hub[Window]

	ctx   context.Context // ends at shutdown: viewers get 1001
	stop  context.CancelFunc
	conns sync.WaitGroup // open viewer connections

	clock     clock
	snapshots snapshots
	// snapshotsFailing is set while the last round of periodic snapshots
	// failed to read Redis, so ticks must not rely on them.
	snapshotsFailing atomic.Bool
	budget           *readBudget // what snapshots may read from Redis
	reads            recentReads // reads of a window shared within snapshotCoalesce
	// thinnedAt is when a periodic snapshot was last put off for the budget
	// (UnixNano; 0: never), so ticks do not rely on them.
	thinnedAt   atomic.Int64
	presence    presence
	writers     *writers    // write every viewer's frames
	outbox      *bus.Outbox // events for other instances
	presenceOut *bus.Outbox // viewer counts for other instances

	// order makes this instance's viewers and the other instances see its events
	// in one order: publishing to the hub and queueing for Redis happen together.
	order sync.Mutex
}

// New returns a View; Run starts it.
func New(d Deps) *View {
	for _, m := range []*Counter{&d.Metrics.DroppedSlow, &d.Metrics.PubSubDropped, &d.Metrics.PubSubReconnects, &d.Metrics.PublishErrors} {
		if *m == nil {
			*m = noMetric{}
		}
	}
	if d.Metrics.Viewers == nil {
		d.Metrics.Viewers = noMetric{}
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	v := &View{d: d, presence: newPresence(), snapshots: newSnapshots(), budget: newReadBudget(d.SnapshotBudget), reads: newRecentReads(), writers: newWriters(d.Writers), outbox: bus.NewOutbox(bus.DefaultQueueSize), presenceOut: bus.NewOutbox(2 * presenceRound)}
	v.hub = hub.New[Window](hub.WithOnChange(v.localViewersChanged))
	v.ctx, v.stop = context.WithCancel(context.Background())
	v.clock.init()
	return v
}

// Run drives the clock, snapshots, presence and the Pub/Sub bridge until Shutdown,
// then drops every viewer.
func (v *View) Run() {
	ctx := v.ctx
	var wg sync.WaitGroup
	wg.Go(func() { v.tickLoop(ctx) })
	wg.Go(func() { v.snapshotLoop(ctx) })
	wg.Go(func() { v.presenceLoop(ctx) })
	wg.Go(func() { v.publishLoop(ctx) })
	wg.Go(func() { v.subscribeLoop(ctx) })
	wg.Wait()
	v.hub.Close()
}

// Shutdown closes every viewer with 1001, stops Run and waits for the viewers'
// connections to end, up to ctx.
func (v *View) Shutdown(ctx context.Context) {
	v.stop()
	done := make(chan struct{})
	go func() { v.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// redisCtx bounds one Redis call of the live view.
func (v *View) redisCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, v.d.CheckTimeout)
}
