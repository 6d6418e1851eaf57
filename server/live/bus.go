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

// Viewer counts have an outbox of their own: a burst of decisions that fills
// the events' queue must not crowd out the presence that tells the other
// instances, within its time to live, to keep sending them.

// send queues an encoded envelope for Redis; when the queue is full the event is
// dropped (viewers still converge through snapshots) rather than slowing checks.
func (v *View) send(env []byte) { v.sendOn(v.outbox, env) }

// sendPresence queues an encoded presence envelope.
func (v *View) sendPresence(env []byte) { v.sendOn(v.presenceOut, env) }

func (v *View) sendOn(o *bus.Outbox, env []byte) {
	if !o.Send(env) {
		v.d.Metrics.PubSubDropped.Inc()
	}
}

func (v *View) publishLoop(ctx context.Context) {
	report := func(_ int, err error) {
		if err != nil && ctx.Err() == nil {
			v.d.Metrics.PublishErrors.Inc()
		}
	}
	done := make(chan struct{})
	go func() { v.presenceOut.Run(ctx, v.d.Redis, v.d.CheckTimeout, report); close(done) }()
	v.outbox.Run(ctx, v.d.Redis, v.d.CheckTimeout, report)
	<-done
}

// subscribeLoop receives other instances' events until ctx ends, starting over
// with a fresh subscription whenever it fails; each new start counts as a
// reconnect.
func (v *View) subscribeLoop(ctx context.Context) {
	bus.Listen(ctx, v.d.Redis, v.receive, bus.ListenHooks{
		Interrupted: func(err error) { v.d.Log.Warn("redis pub/sub interrupted; resubscribing", "err", err) },
		Resubscribed: func(attempts int) {
			v.d.Log.Info("redis pub/sub resubscribed", "attempts", attempts)
		},
		Reconnect: v.d.Metrics.PubSubReconnects.Inc,
	})
}

// receive hands other instances' events to this instance's viewers.
func (v *View) receive(payload []byte) {
	envs, err := bus.Decode(payload)
	if err != nil {
		return
	}
	v.remotePresence(envs)
	for _, e := range envs {
		if e.Origin == v.d.Instance {
			continue
		}
		if e.Topic != "" && e.Kind != bus.KindPresence { // an event: its message goes to the window's viewers as it is
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
