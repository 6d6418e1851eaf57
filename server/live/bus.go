package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// The bus carries events between instances over classic Redis Pub/Sub, which works
// standalone, on a cluster and embedded. Envelopes queue in an outbox and one
// goroutine publishes them in order, several to a PUBLISH when they pile up: a
// burst of decisions costs Redis a few commands, not one per decision.
const (
	eventsChannel      = "ratescope:events"
	publishQueue       = 4096 // envelopes waiting for Redis; beyond that they are dropped
	publishBatch       = 256  // envelopes per PUBLISH, at most
	resubscribeBackoff = 500 * time.Millisecond
	subscribeTimeout   = 2 * time.Second
	pubsubIdle         = 2 * time.Second // ping the subscription after this long without messages
)

// Kinds of envelope.
const (
	kindDecision = TypeDecision
	kindReset    = TypeReset
	kindRace     = TypeRace
	kindLab      = TypeLab
	kindLabReset = TypeLabReset
	kindPresence = "presence"
)

// envelope carries one event between instances. A PUBLISH payload is one envelope
// or a JSON array of them, in order.
type envelope struct {
	Origin string          `json:"o"`           // the instance that published it
	Kind   string          `json:"k"`           // decision, reset, race or presence
	Topic  string          `json:"t,omitempty"` // the window, as "policy|key", for events
	Msg    json.RawMessage `json:"m,omitempty"` // the viewer message, as sent
	// Viewers maps windows ("policy|key") to this instance's viewer count (presence).
	Viewers map[string]int `json:"v,omitempty"`
}

type bus struct {
	outbox chan []byte // encoded envelopes, published in order by publishLoop
}

func newBus() bus { return bus{outbox: make(chan []byte, publishQueue)} }

// send queues an encoded envelope for Redis; when the queue is full the event is
// dropped (viewers still converge through snapshots) rather than slowing checks.
func (v *View) send(env []byte) {
	select {
	case v.bus.outbox <- env:
	default:
		v.d.Metrics.PubSubDropped.Inc()
	}
}

func (v *View) publishLoop(ctx context.Context) {
	batch := make([][]byte, 0, publishBatch)
	var payload []byte
	for {
		select {
		case <-ctx.Done():
			return
		case env := <-v.bus.outbox:
			batch = append(batch[:0], env)
		}
	more:
		for len(batch) < publishBatch {
			select {
			case env := <-v.bus.outbox:
				batch = append(batch, env)
			default:
				break more
			}
		}
		payload = appendFrame(payload[:0], batch)
		pctx, cancel := v.redisCtx(ctx)
		if err := v.d.Redis.Publish(pctx, eventsChannel, payload).Err(); err != nil && ctx.Err() == nil {
			v.d.Metrics.PublishErrors.Inc()
		}
		cancel()
		clear(batch)
		if cap(payload) > 1<<20 {
			payload = nil // a burst's buffer is not kept
		}
	}
}

// subscribeLoop receives other instances' events. It watches the subscription
// itself (a ping when nothing arrives for a while) and starts over with a fresh
// connection whenever it fails, so it survives Redis restarts and pauses; each new
// start after a failure counts as a reconnect.
func (v *View) subscribeLoop(ctx context.Context) {
	failed := false
	for ctx.Err() == nil {
		if failed {
			v.d.Metrics.PubSubReconnects.Inc()
			select {
			case <-ctx.Done():
				return
			case <-time.After(resubscribeBackoff):
			}
		}
		failed = true
		if err := v.receiveUntilError(ctx); err != nil && ctx.Err() == nil {
			v.d.Log.Warn("redis pub/sub interrupted; resubscribing", "err", err)
		}
	}
}

func (v *View) receiveUntilError(ctx context.Context) error {
	ps := v.d.Redis.Subscribe(ctx, eventsChannel)
	defer ps.Close()
	// A blocked receive does not watch ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	_, err := ps.Receive(sctx) // the subscription's confirmation
	cancel()
	if err != nil {
		return err
	}
	for {
		msg, err := ps.ReceiveTimeout(ctx, pubsubIdle)
		if ctx.Err() != nil {
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			pctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
			err = ps.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if m, ok := msg.(*redis.Message); ok {
			v.receive([]byte(m.Payload))
		}
	}
}

// receive hands other instances' events to this instance's viewers.
func (v *View) receive(payload []byte) {
	var envs []envelope
	if p := bytes.TrimLeft(payload, " \t\r\n"); len(p) > 0 && p[0] == '[' {
		if err := json.Unmarshal(p, &envs); err != nil {
			return
		}
	} else {
		var e envelope
		if err := json.Unmarshal(payload, &e); err != nil {
			return
		}
		envs = []envelope{e}
	}
	for _, e := range envs {
		if e.Origin == v.d.Instance {
			continue
		}
		switch e.Kind {
		case kindPresence:
			v.remotePresence(e.Origin, e.Viewers)
		case kindDecision, kindReset, kindRace, kindLab, kindLabReset:
			w := windowFromWire(e.Topic)
			if v.hub.Count(w) > 0 {
				v.hub.Publish(w, e.Msg)
				if !w.IsLab() {
					v.snapshots.markDirty(w)
				}
			}
		}
	}
}
