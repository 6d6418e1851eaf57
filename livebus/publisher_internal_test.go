package livebus

import (
	"testing"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
)

// A full queue drops decisions and counts them; Decision never blocks, even
// when nothing publishes (Run not started).
func TestPublisherDropsWhenFull(t *testing.T) {
	p := NewPublisher(nil, "svc", WithQueueSize(2))
	w := bus.Window{Key: "alice", Policy: "demo"}
	p.receive(bus.AppendBatch(nil, [][]byte{
		bus.Envelope{Origin: "svc", Kind: bus.KindPresence, Topic: "demo|bob", Viewers: 1}.Encode(), // its own: ignored
		bus.Envelope{Origin: "srv", Kind: bus.KindPresence, Topic: w.Topic(), Viewers: 1}.Encode(),
	}))
	rules := []limiter.RuleState{{Limit: 5, WindowMs: 10000, Count: 1, Remaining: 4, OldestMs: 1}}
	for range 5 {
		p.Decision(limiter.Decision{Allowed: true, Key: w.Key, Policy: w.Policy, Rules: rules})
		p.Decision(limiter.Decision{Allowed: true, Key: "bob", Policy: "demo", Rules: rules}) // nobody watches bob
	}
	if s := p.Stats(); s.Dropped != 3 || p.outbox.Len() != 2 {
		t.Errorf("Stats() = %+v with %d queued, want 3 dropped and 2 queued", s, p.outbox.Len())
	}
}
