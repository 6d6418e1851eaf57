package livebus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/livebus"
)

func newClient(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// channel subscribes to the bus and returns every envelope published on it.
func channel(t *testing.T, rdb *redis.Client) <-chan bus.Envelope {
	t.Helper()
	ps := rdb.Subscribe(context.Background(), bus.Channel(rdb))
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := make(chan bus.Envelope, 1024)
	go func() {
		defer close(out)
		for m := range ps.Channel() {
			envs, err := bus.Decode([]byte(m.Payload))
			if err != nil {
				t.Errorf("undecodable payload %q: %v", m.Payload, err)
				return
			}
			for _, e := range envs {
				out <- e
			}
		}
	}()
	t.Cleanup(func() { ps.Close() })
	return out
}

func decision(w bus.Window, id string) limiter.Decision {
	return limiter.Decision{
		Allowed: true, Key: w.Key, Policy: w.Policy, Cost: 1, NowMs: 1000, ID: id,
		Rules: []limiter.RuleState{{Limit: 5, WindowMs: 10000, Count: 1, Remaining: 4, OldestMs: 1000}},
	}
}

// A Publisher learns from presence envelopes which windows are watched and
// publishes decisions on those alone, in order, with its instance name; a
// window nobody watches gets nothing on the channel.
func TestPublisherPublishesOnlyWatchedWindows(t *testing.T) {
	rdb := newClient(t)
	envs := channel(t, rdb)
	p := livebus.NewPublisher(rdb, "svc-1")
	go p.Run(context.Background())
	t.Cleanup(p.Close)
	watched := bus.Window{Key: "alice", Policy: "demo"}
	unwatched := bus.Window{Key: "bob", Policy: "demo"}
	presence := bus.AppendBatch(nil, [][]byte{
		bus.Envelope{Origin: "srv-a", Kind: bus.KindPresence, Topic: watched.Topic(), Viewers: 1}.Encode(),
		bus.Envelope{Origin: "srv-a", Kind: bus.KindPresence, Topic: unwatched.Topic()}.Encode(),
	})

	var got []bus.Envelope // every decision envelope seen
	take := func(until func(bus.Envelope) bool, wait time.Duration) bool {
		timeout := time.After(wait)
		for {
			select {
			case e := <-envs:
				if e.Kind != bus.TypeDecision {
					continue
				}
				got = append(got, e)
				if until(e) {
					return true
				}
			case <-timeout:
				return false
			}
		}
	}
	// Until the Publisher has heard of the viewer, nothing is published;
	// announce it until a probe gets through.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		if err := rdb.Publish(context.Background(), bus.Channel(rdb), presence).Err(); err != nil {
			t.Fatal(err)
		}
		p.Decision(decision(unwatched, fmt.Sprint("u", i)))
		p.Decision(decision(watched, fmt.Sprint("probe", i)))
		if take(func(e bus.Envelope) bool { return e.Topic == watched.Topic() }, 200*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no decision published for a watched window")
		}
	}
	const n = 300
	for i := range n {
		p.Decision(decision(unwatched, fmt.Sprint("u", i)))
		p.Decision(decision(watched, fmt.Sprint("w", i)))
	}
	if !take(func(e bus.Envelope) bool {
		return string(e.Msg) == string(bus.DecisionMessage(decision(watched, fmt.Sprint("w", n-1)), "svc-1"))
	}, 10*time.Second) {
		t.Fatalf("the last decision did not arrive; got %d envelopes", len(got))
	}
	var ws []bus.Envelope
	for _, e := range got {
		if e.Topic != watched.Topic() || e.Origin != "svc-1" {
			t.Fatalf("published %+v: only decisions on %s, from svc-1, may be", e, watched.Topic())
		}
		if len(ws) > 0 || string(e.Msg) == string(bus.DecisionMessage(decision(watched, "w0"), "svc-1")) {
			ws = append(ws, e)
		}
	}
	if len(ws) != n {
		t.Fatalf("%d decisions after the probe arrived, want %d", len(ws), n)
	}
	for i, e := range ws {
		if want := bus.DecisionMessage(decision(watched, fmt.Sprint("w", i)), "svc-1"); string(e.Msg) != string(want) {
			t.Fatalf("decision %d is %s, want %s", i, e.Msg, want)
		}
	}
	// The last PUBLISH is counted once Redis has answered it, which may be
	// after the subscriber got it.
	for s := p.Stats(); s.Published < n+1; s = p.Stats() {
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("Stats() = %+v, want at least %d published", s, n+1)
		}
		time.Sleep(time.Millisecond)
	}
	if s := p.Stats(); s.Dropped != 0 || s.Failed != 0 {
		t.Errorf("Stats() = %+v, want none dropped or failed", s)
	}
}

// Close ends Run and every goroutine the Publisher started; Run after Close
// refuses to start.
func TestPublisherStopsCleanly(t *testing.T) {
	rdb := newClient(t)
	rdb.Ping(context.Background()) // the pool's first connection is the test's
	baseline := goleak.IgnoreCurrent()

	p := livebus.NewPublisher(rdb, "svc-1")
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for { // running: subscribed to the channel
		n, err := rdb.PubSubNumSub(context.Background(), bus.Channel(rdb)).Result()
		if err == nil && n[bus.Channel(rdb)] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the publisher did not subscribe")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Close()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
	p.Close() // twice is fine
	if err := p.Run(context.Background()); err != livebus.ErrRunning {
		t.Errorf("Run after Close returned %v, want ErrRunning", err)
	}
	p.Decision(decision(bus.Window{Key: "alice", Policy: "demo"}, "late")) // dropped silently
	goleak.VerifyNone(t, baseline, goleak.IgnoreAnyFunction("github.com/ratescope/ratescope/internal/redistest.(*Process).launch.func1"))
}

// Run ends with its context as with Close.
func TestPublisherRunEndsWithContext(t *testing.T) {
	rdb := newClient(t)
	p := livebus.NewPublisher(rdb, "svc-1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	p.Close()
}
