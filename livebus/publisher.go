package livebus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
)

// Defaults of a Publisher, each changed by an option.
const (
	DefaultQueueSize      = bus.DefaultQueueSize // decisions waiting for Redis; beyond that they are dropped
	DefaultPublishTimeout = time.Second          // bounds one PUBLISH
)

// Publisher sends a service's decisions to ratescope's live view: those on
// windows that a viewer of some ratescope instance on the same Redis watches,
// as it learns from their presence envelopes. Decision never blocks: one
// goroutine publishes, in order, several envelopes to a PUBLISH when they pile
// up, and a full queue drops the decision and counts it (Stats). It is safe
// for concurrent use.
type Publisher struct {
	rdb      bus.Client
	instance string
	cfg      publisherConfig
	presence *bus.Presence
	outbox   *bus.Outbox

	published, dropped, failed atomic.Uint64
	swept                      time.Time // when receive last swept presence; its goroutine's own

	mu      sync.Mutex
	closed  bool
	cancel  context.CancelFunc // set while Run runs
	stopped chan struct{}      // closed when Run returns
}

// PublisherOption configures a Publisher.
type PublisherOption func(*publisherConfig)

type publisherConfig struct {
	queueSize int
	timeout   time.Duration
	log       *slog.Logger
}

// WithQueueSize sets how many decisions may wait for Redis (default
// DefaultQueueSize); more are dropped.
func WithQueueSize(n int) PublisherOption {
	return func(c *publisherConfig) { c.queueSize = max(n, 1) }
}

// WithPublishTimeout bounds each PUBLISH (default DefaultPublishTimeout).
func WithPublishTimeout(d time.Duration) PublisherOption {
	return func(c *publisherConfig) { c.timeout = d }
}

// WithLogger logs the subscription's interruptions (default: discarded).
func WithLogger(l *slog.Logger) PublisherOption {
	return func(c *publisherConfig) { c.log = l }
}

// NewPublisher returns a Publisher that names its decisions instance (the
// decision message's "instance"); Run starts it. Give each process its own
// instance name, distinct from the ratescope servers'.
func NewPublisher(rdb redis.UniversalClient, instance string, opts ...PublisherOption) *Publisher {
	cfg := publisherConfig{queueSize: DefaultQueueSize, timeout: DefaultPublishTimeout, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	return &Publisher{
		rdb: rdb, instance: instance, cfg: cfg, presence: bus.NewPresence(),
		outbox: bus.NewOutbox(cfg.queueSize), stopped: make(chan struct{}),
	}
}

// Decision publishes d if some viewer watches its window; otherwise it costs
// a map lookup. It never blocks.
func (p *Publisher) Decision(d limiter.Decision) {
	w := bus.Window{Key: d.Key, Policy: d.Policy}
	if !p.presence.Watched(w) {
		return
	}
	env := bus.Envelope{Origin: p.instance, Kind: bus.TypeDecision, Topic: w.Topic(), Msg: bus.DecisionMessage(d, p.instance)}
	if !p.outbox.Send(env.Encode()) {
		p.dropped.Add(1)
	}
}

// Stats are a Publisher's counts since it was made.
type Stats struct {
	Published uint64 // decisions sent to Redis
	Dropped   uint64 // decisions dropped: the queue was full
	Failed    uint64 // decisions whose PUBLISH failed or timed out
}

// Stats returns the counts so far.
func (p *Publisher) Stats() Stats {
	return Stats{Published: p.published.Load(), Dropped: p.dropped.Load(), Failed: p.failed.Load()}
}

// ErrRunning is Run's answer when the Publisher already runs or was closed.
var ErrRunning = errors.New("livebus: the publisher is running or closed")

// Run listens for presence and publishes decisions until ctx ends or Close is
// called; decisions still queued then are dropped. It returns nil, or
// ErrRunning when called twice or after Close.
func (p *Publisher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.mu.Lock()
	if p.closed || p.cancel != nil {
		p.mu.Unlock()
		return ErrRunning
	}
	p.cancel = cancel
	p.mu.Unlock()
	defer close(p.stopped)

	var wg sync.WaitGroup
	wg.Go(func() {
		bus.Listen(ctx, p.rdb, p.receive, bus.ListenHooks{Interrupted: func(err error) {
			p.cfg.log.Warn("livebus: redis pub/sub interrupted; resubscribing", "err", err)
		}})
	})
	wg.Go(func() {
		p.outbox.Run(ctx, p.rdb, p.cfg.timeout, func(n int, err error) {
			if err != nil {
				p.failed.Add(uint64(n))
			} else {
				p.published.Add(uint64(n))
			}
		})
	})
	wg.Wait()
	return nil
}

// Close stops Run and waits for it to return. Decisions after Close are
// never published; Decision may still be called.
func (p *Publisher) Close() {
	p.mu.Lock()
	p.closed = true
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-p.stopped
	}
}

// presenceMark is in every payload that holds a presence envelope.
var presenceMark = []byte(`"k":"` + bus.KindPresence + `"`)

// receive records other instances' presence; their events are for viewers, so
// a payload without presence is not even decoded.
func (p *Publisher) receive(payload []byte) {
	if !bytes.Contains(payload, presenceMark) {
		return
	}
	envs, err := bus.Decode(payload)
	if err != nil {
		return
	}
	p.presence.Record(envs, p.instance)
	// Presence arrives several times a second while anyone watches: often
	// enough to forget what expired, so the windows kept are those watched now.
	if now := time.Now(); now.Sub(p.swept) >= bus.PresenceEvery {
		p.swept = now
		p.presence.Sweep()
	}
}
