package bus

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxBatch is the most envelopes one PUBLISH carries.
const MaxBatch = 256

// DefaultQueueSize is how many envelopes an outbox holds unless told
// otherwise; beyond that they are dropped.
const DefaultQueueSize = 4096

// maxKeptPayload bounds the payload buffer kept between bursts.
const maxKeptPayload = 1 << 20

// Client is what the bus needs of Redis, so a Client, a ClusterClient or a
// Ring all fit.
type Client interface {
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Outbox queues encoded envelopes and publishes them on Channel(rdb) from one
// goroutine, in order, several to a PUBLISH when they pile up (up to
// MaxBatch): a burst of events costs Redis a few commands, not one each.
type Outbox struct {
	queue chan []byte
}

// NewOutbox returns an Outbox that holds up to size envelopes.
func NewOutbox(size int) *Outbox { return &Outbox{queue: make(chan []byte, max(size, 1))} }

// Send queues an encoded envelope; it never blocks, and reports false when
// the queue was full and env was dropped.
func (o *Outbox) Send(env []byte) bool {
	select {
	case o.queue <- env:
		return true
	default:
		return false
	}
}

// Len is the number of envelopes waiting.
func (o *Outbox) Len() int { return len(o.queue) }

// Run publishes what is sent until ctx ends, each PUBLISH bounded by
// timeout; report, when not nil, learns how many envelopes each PUBLISH
// carried and its error.
func (o *Outbox) Run(ctx context.Context, rdb Client, timeout time.Duration, report func(n int, err error)) {
	channel := Channel(rdb)
	batch := make([][]byte, 0, MaxBatch)
	var payload []byte
	for {
		select {
		case <-ctx.Done():
			return
		case env := <-o.queue:
			batch = append(batch[:0], env)
		}
	more:
		for len(batch) < MaxBatch {
			select {
			case env := <-o.queue:
				batch = append(batch, env)
			default:
				break more
			}
		}
		payload = AppendBatch(payload[:0], batch)
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := rdb.Publish(pctx, channel, payload).Err()
		cancel()
		if report != nil {
			report(len(batch), err)
		}
		clear(batch)
		if cap(payload) > maxKeptPayload {
			payload = nil // a burst's buffer is not kept
		}
	}
}
