package live

import (
	"context"

	"github.com/ratescope/ratescope/internal/bus"
)

// The bus carries events between instances over classic Redis Pub/Sub, in the
// protocol of internal/bus (the one a Go service's livebus.Publisher speaks
// too). An event's envelope is of the kind of the message it carries.
// Envelopes queue in an outbox (bus.Outbox) whose one goroutine publishes
// them in order, several to a PUBLISH when they pile up: a burst of
// decisions costs Redis a few commands, not one per decision.

// send queues an encoded envelope for Redis; when the queue is full the event is
// dropped (viewers still converge through snapshots) rather than slowing checks.
func (v *View) send(env []byte) {
	if !v.outbox.Send(env) {
		v.d.Metrics.PubSubDropped.Inc()
	}
}

func (v *View) publishLoop(ctx context.Context) {
	v.outbox.Run(ctx, v.d.Redis, v.d.CheckTimeout, func(_ int, err error) {
		if err != nil && ctx.Err() == nil {
			v.d.Metrics.PublishErrors.Inc()
		}
	})
}

// subscribeLoop receives other instances' events until ctx ends, starting over
// with a fresh subscription whenever it fails; each new start counts as a
// reconnect.
func (v *View) subscribeLoop(ctx context.Context) {
	bus.Listen(ctx, v.d.Redis, v.receive, bus.ListenHooks{
		Interrupted: func(err error) { v.d.Log.Warn("redis pub/sub interrupted; resubscribing", "err", err) },
		Reconnect:   v.d.Metrics.PubSubReconnects.Inc,
	})
}

// receive hands other instances' events to this instance's viewers.
func (v *View) receive(payload []byte) {
	envs, err := bus.Decode(payload)
	if err != nil {
		return
	}
	for _, e := range envs {
		if e.Origin == v.d.Instance {
			continue
		}
		switch {
		case e.Kind == bus.KindPresence:
			v.remotePresence(e.Origin, e.Viewers)
		case e.Topic != "": // an event: its message goes to the window's viewers as it is
			w := bus.ParseTopic(e.Topic)
			if v.hub.Count(w) > 0 {
				v.hub.Publish(w, e.Msg)
				if !isLab(w) {
					v.snapshots.markDirty(w)
				}
			}
		}
	}
}
