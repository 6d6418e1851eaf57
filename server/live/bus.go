package live

import (
	"context"

	"github.com/ratescope/ratescope/livebus"
)

// The bus carries events between instances over classic Redis Pub/Sub, in the
// protocol package livebus defines (the one a Go service's livebus.Publisher
// speaks too). Envelopes queue in an outbox and one goroutine publishes them in
// order, several to a PUBLISH when they pile up: a burst of decisions costs
// Redis a few commands, not one per decision.
const (
	publishQueue = 4096 // envelopes waiting for Redis; beyond that they are dropped
	publishBatch = 256  // envelopes per PUBLISH, at most
)

// Kinds of envelope.
const (
	kindDecision = livebus.KindDecision
	kindReset    = livebus.KindReset
	kindRace     = livebus.KindRace
	kindPresence = livebus.KindPresence
)

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
		payload = livebus.AppendBatch(payload[:0], batch)
		pctx, cancel := v.redisCtx(ctx)
		if err := v.d.Redis.Publish(pctx, livebus.Channel, payload).Err(); err != nil && ctx.Err() == nil {
			v.d.Metrics.PublishErrors.Inc()
		}
		cancel()
		clear(batch)
		if cap(payload) > 1<<20 {
			payload = nil // a burst's buffer is not kept
		}
	}
}

// subscribeLoop receives other instances' events until ctx ends, starting over
// with a fresh subscription whenever it fails; each new start counts as a
// reconnect.
func (v *View) subscribeLoop(ctx context.Context) {
	livebus.Listen(ctx, v.d.Redis, v.receive, livebus.ListenHooks{
		Interrupted: func(err error) { v.d.Log.Warn("redis pub/sub interrupted; resubscribing", "err", err) },
		Reconnect:   v.d.Metrics.PubSubReconnects.Inc,
	})
}

// receive hands other instances' events to this instance's viewers.
func (v *View) receive(payload []byte) {
	envs, err := livebus.Decode(payload)
	if err != nil {
		return
	}
	for _, e := range envs {
		if e.Origin == v.d.Instance {
			continue
		}
		switch e.Kind {
		case kindPresence:
			v.remotePresence(e.Origin, e.Viewers)
		case kindDecision, kindReset, kindRace:
			w := livebus.ParseTopic(e.Topic)
			if v.hub.Count(w) > 0 {
				v.hub.Publish(w, e.Msg)
				v.snapshots.markDirty(w)
			}
		}
	}
}
