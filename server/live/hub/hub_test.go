package hub_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/server/live/hub"
)

// failsafe bounds waits that only a bug could make long; no test relies on timing.
const failsafe = 10 * time.Second

// Kinds of latest message, as the live view uses them.
const (
	tick hub.Kind = iota
	viewers
	snapshot
)

type sub = hub.Subscription[string]

func TestPublishReachesOnlyTopicSubscribers(t *testing.T) {
	h := hub.New[string]()
	a1, a2, b := h.Subscribe("a"), h.Subscribe("a"), h.Subscribe("b")

	h.Publish("a", []byte("hello"))
	h.Publish("nobody", []byte("lost"))

	for _, s := range []*sub{a1, a2} {
		assertMessages(t, s, "hello")
	}
	assertMessages(t, b)
	if got := h.Count("a"); got != 2 {
		t.Errorf("Count(a) = %d, want 2", got)
	}
	if got, want := slices.Sorted(slices.Values(h.Topics())), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Topics() = %q, want %q", got, want)
	}
	if got := h.Total(); got != 3 {
		t.Errorf("Total() = %d, want 3", got)
	}
	if a1.Topic() != "a" || b.Topic() != "b" {
		t.Errorf("Topic() = %q, %q, want a, b", a1.Topic(), b.Topic())
	}
}

// A burst far longer than any count-based buffer stays queued, in order, as long as
// it is within the byte budget and young enough.
func TestPublishQueuesABurstInOrder(t *testing.T) {
	h := hub.New[string]()
	s := h.Subscribe("a")
	var want []string
	for i := range 10_000 {
		want = append(want, strconv.Itoa(i))
		h.Publish("a", []byte(want[i]))
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err() = %v after a burst within the limits, want nil", err)
	}
	if n, bytes := s.Queued(); n != len(want) || bytes != len(strings.Join(want, "")) {
		t.Errorf("Queued() = %d messages, %d bytes; want %d, %d", n, bytes, len(want), len(strings.Join(want, "")))
	}
	assertMessages(t, s, want...)
}

func TestBroadcastReachesEveryTopic(t *testing.T) {
	h := hub.New[string]()
	subs := []*sub{h.Subscribe("a"), h.Subscribe("a"), h.Subscribe("b"), h.Subscribe("c")}

	h.Broadcast([]byte("status"))

	for _, s := range subs {
		assertMessages(t, s, "status")
	}
}

func TestSlowSubscriberIsDroppedByBytesWithoutHoldingOthersBack(t *testing.T) {
	const budget = 1000
	h := hub.New[string](hub.WithLimits[string](budget, time.Hour))
	slow, fast := h.Subscribe("a"), h.Subscribe("a")
	msg := strings.Repeat("x", 100)

	// The fast subscriber takes after every publish; the slow one never does. The
	// budget holds exactly ten messages: the eleventh takes the slow one past it.
	for i := range 12 {
		publishWithin(t, h, "a", msg)
		assertMessages(t, fast, msg)
		var want error
		if i >= 10 {
			want = hub.ErrSlow
		}
		if err := slow.Err(); err != want {
			t.Fatalf("after %d messages (%d bytes): slow.Err() = %v, want %v", i+1, 100*(i+1), err, want)
		}
	}
	select {
	case <-slow.Done():
	default:
		t.Fatal("slow subscriber's Done not closed")
	}
	if err := fast.Err(); err != nil {
		t.Errorf("fast.Err() = %v, want nil", err)
	}
	if got := h.Count("a"); got != 1 {
		t.Errorf("Count(a) = %d, want 1", got)
	}
	// A dropped subscriber's messages are let go at once: memory stays bounded.
	if n, bytes := slow.Queued(); n != 0 || bytes != 0 {
		t.Errorf("dropped subscriber still holds %d messages, %d bytes", n, bytes)
	}
	assertMessages(t, slow)
	slow.Close()
	if err := slow.Err(); err != hub.ErrSlow {
		t.Errorf("Err() after Close of a dropped subscription = %v, want ErrSlow", err)
	}
}

func TestSlowSubscriberIsDroppedByAge(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	h := hub.New[string](hub.WithLimits[string](1<<20, 5*time.Second), hub.WithClock[string](clock.Now))
	stalled, reader := h.Subscribe("a"), h.Subscribe("a")

	h.Publish("a", []byte("1"))
	clock.advance(5 * time.Second)
	h.Publish("a", []byte("2")) // the oldest has waited exactly 5 s: not more
	if err := stalled.Err(); err != nil {
		t.Fatalf("dropped at exactly the age limit: %v", err)
	}
	assertMessages(t, reader, "1", "2")

	// Ticks alone reveal a stalled queue, even when no event comes.
	clock.advance(time.Millisecond)
	h.BroadcastLatest(tick, []byte("tick"))
	if err := stalled.Err(); err != hub.ErrSlow {
		t.Fatalf("a queue 5.001 s old: Err() = %v, want ErrSlow", err)
	}
	if err := reader.Err(); err != nil {
		t.Fatalf("a reader that keeps up: Err() = %v, want nil", err)
	}
	assertMessages(t, reader, "tick")

	// An empty queue has no age, however long since the last message.
	clock.advance(time.Hour)
	h.Publish("a", []byte("3"))
	if err := reader.Err(); err != nil {
		t.Fatalf("a drained reader after an hour: Err() = %v, want nil", err)
	}
	assertMessages(t, reader, "3")
}

func TestSnapshotsSupersedeAndFollowQueuedMessages(t *testing.T) {
	h := hub.New[string]()
	a, b := h.Subscribe("a"), h.Subscribe("b")

	h.PublishLatest("a", snapshot, []byte("snapshot 1"))
	h.Publish("a", []byte("decision 1"))
	h.PublishLatest("a", snapshot, []byte("snapshot 2"))
	h.Publish("a", []byte("decision 2"))
	h.PublishLatest("b", snapshot, []byte("snapshot of b"))
	h.PublishLatest("nobody", snapshot, []byte("lost"))

	// Queued messages first, in publish order; then only the newest snapshot.
	assertMessages(t, a, "decision 1", "decision 2", "snapshot 2")
	assertMessages(t, b, "snapshot of b")
}

func TestLatestKeepsOnlyTheNewestOfEachKind(t *testing.T) {
	h := hub.New[string](hub.WithLimits[string](100, time.Hour))
	a, b := h.Subscribe("a"), h.Subscribe("b")

	// Far more bytes than the budget: "latest" messages never fill the queue.
	for i := range 1000 {
		h.BroadcastLatest(tick, []byte("tick "+strconv.Itoa(i)))
	}
	h.PublishLatest("a", viewers, []byte("viewers 2"))
	h.PublishLatest("a", viewers, []byte("viewers 3"))
	h.Publish("a", []byte("decision"))

	for _, s := range []*sub{a, b} {
		if err := s.Err(); err != nil {
			t.Fatalf("Err() = %v after many latest messages, want nil", err)
		}
		select {
		case <-s.Ready():
		default:
			t.Fatalf("Ready() has no token after messages")
		}
	}
	assertMessages(t, a, "decision", "tick 999", "viewers 3")
	assertMessages(t, b, "tick 999")

	// A message offered after everything was taken raises a new token.
	h.BroadcastLatest(tick, []byte("tick again"))
	select {
	case <-a.Ready():
	default:
		t.Fatal("Ready() has no token for a message offered after Take")
	}
	assertMessages(t, a, "tick again")
}

// TestPublishStatesGoOutTogether: states offered together wake a subscriber
// once and are taken in one go, whatever was offered of their kinds before.
func TestPublishStatesGoOutTogether(t *testing.T) {
	h := hub.New[string]()
	a := h.Subscribe("a")
	h.PublishLatest("a", snapshot, []byte("old snapshot"))
	<-a.Ready()
	if got, _ := a.Take(nil, 1<<20); len(got) != 1 {
		t.Fatalf("took %q", got)
	}
	h.PublishStates("a", hub.State{Kind: tick, Msg: []byte("tick")}, hub.State{Kind: snapshot, Msg: []byte("snapshot")})
	<-a.Ready()
	got, more := a.Take(nil, 1<<20)
	if strings.Join(bytesToStrings(got), ",") != "tick,snapshot" || more {
		t.Fatalf("took %q (more %v), want tick and snapshot in one go", got, more)
	}
	select {
	case <-a.Ready():
		t.Fatal("a second token for states offered together")
	default:
	}
}

func bytesToStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// TestAnyKindHasItsOwnSlot: the hub holds as many kinds of latest message as
// its publisher offers, each in its own slot, in Kind order — it is sized by
// nobody's constant.
func TestAnyKindHasItsOwnSlot(t *testing.T) {
	h := hub.New[string]()
	s := h.Subscribe("a")
	for k := hub.Kind(9); ; k-- {
		h.PublishLatest("a", k, []byte("kind "+strconv.Itoa(int(k))))
		if k == 0 {
			break
		}
	}
	assertMessages(t, s, "kind 0", "kind 1", "kind 2", "kind 3", "kind 4", "kind 5", "kind 6", "kind 7", "kind 8", "kind 9")
}

func TestTakeBoundsOneFrame(t *testing.T) {
	h := hub.New[string]()
	s := h.Subscribe("a")
	hundred := func(c byte) string { return strings.Repeat(string(c), 100) }
	for c := byte('a'); c < 'f'; c++ {
		h.Publish("a", []byte(hundred(c)))
	}
	h.PublishLatest("a", tick, []byte(hundred('t')))

	got, more := s.Take(nil, 250)
	if want := []string{hundred('a'), hundred('b')}; !slices.Equal(strs(got), want) || !more {
		t.Fatalf("Take(250) = %d messages, more %v; want a, b and more", len(got), more)
	}
	got, more = s.Take(nil, 300)
	if want := []string{hundred('c'), hundred('d'), hundred('e')}; !slices.Equal(strs(got), want) || !more {
		t.Fatalf("Take(300) = %d messages, more %v; want c, d, e and more (the tick did not fit)", len(got), more)
	}
	got, more = s.Take(nil, 300)
	if want := []string{hundred('t')}; !slices.Equal(strs(got), want) || more {
		t.Fatalf("Take(300) = %d messages, more %v; want the tick and no more", len(got), more)
	}

	// A message bigger than a frame still goes, alone.
	h.Publish("a", []byte(hundred('x')+hundred('x')))
	h.Publish("a", []byte("small"))
	got, more = s.Take(nil, 50)
	if len(got) != 1 || len(got[0]) != 200 || !more {
		t.Fatalf("Take(50) of an oversized message = %q, more %v", got, more)
	}
	assertMessages(t, s, "small")
}

func TestSubscriptionCloseIsIdempotent(t *testing.T) {
	rec := &recorder{}
	h := hub.New[string](hub.WithOnChange(rec.record))
	s, other := h.Subscribe("a"), h.Subscribe("a")

	s.Close()
	s.Close()

	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed")
	}
	if err := s.Err(); err != hub.ErrClosed {
		t.Errorf("Err() = %v, want ErrClosed", err)
	}
	if got := h.Count("a"); got != 1 {
		t.Errorf("Count(a) = %d, want 1", got)
	}
	h.Publish("a", []byte("after"))
	assertMessages(t, s)
	assertMessages(t, other, "after")
	rec.assert(t, "a=1", "a=2", "a=1")

	other.Close()
	if got := h.Topics(); len(got) != 0 {
		t.Errorf("Topics() = %q after last Close, want none", got)
	}
}

func TestOnChangeCounts(t *testing.T) {
	rec := &recorder{}
	h := hub.New[string](hub.WithLimits[string](1, time.Hour), hub.WithOnChange(rec.record))

	a1 := h.Subscribe("a")
	h.Subscribe("a")
	b := h.Subscribe("b")
	a1.Close()
	h.Publish("b", []byte("1"))
	h.Publish("b", []byte("2")) // b never takes: past its 1-byte budget
	h.Subscribe("c")
	h.Publish("nobody", []byte("3"))

	if b.Err() != hub.ErrSlow {
		t.Errorf("b.Err() = %v, want ErrSlow", b.Err())
	}
	rec.assert(t, "a=1", "a=2", "b=1", "a=1", "b=0", "c=1")

	rec.calls = nil
	h.Broadcast([]byte("4")) // fills a and c
	h.Broadcast([]byte("5")) // drops both, in map order
	slices.Sort(rec.calls)
	rec.assert(t, "a=0", "c=0")
}

func TestHubClose(t *testing.T) {
	rec := &recorder{}
	h := hub.New[string](hub.WithOnChange(rec.record))
	a, b := h.Subscribe("a"), h.Subscribe("b")

	h.Close()
	h.Close()

	for _, s := range []*sub{a, b} {
		select {
		case <-s.Done():
		default:
			t.Fatalf("%s: Done not closed", s.Topic())
		}
		if err := s.Err(); err != hub.ErrClosed {
			t.Errorf("%s: Err() = %v, want ErrClosed", s.Topic(), err)
		}
	}
	if h.Total() != 0 || h.Count("a") != 0 || len(h.Topics()) != 0 {
		t.Errorf("after Close: Total %d, Count(a) %d, Topics %q; want empty", h.Total(), h.Count("a"), h.Topics())
	}

	late := h.Subscribe("a")
	select {
	case <-late.Done():
	default:
		t.Fatal("Subscribe after Close: Done not closed")
	}
	if err := late.Err(); err != hub.ErrClosed {
		t.Errorf("Subscribe after Close: Err() = %v, want ErrClosed", err)
	}
	h.Publish("a", []byte("x"))
	h.Broadcast([]byte("x"))
	a.Close()
	late.Close()
	slices.Sort(rec.calls[2:])
	rec.assert(t, "a=1", "b=1", "a=0", "b=0")
}

func TestConcurrentUse(t *testing.T) {
	const (
		topics      = 4
		subscribers = 64
		publishers  = 4
		messages    = 200
	)
	var changes sync.Map // topic -> struct{}; exercises the callback from many goroutines
	h := hub.New[string](hub.WithLimits[string](64, time.Hour), hub.WithOnChange(func(topic string, _ int) { changes.Store(topic, struct{}{}) }))
	stop := make(chan struct{})

	var subs sync.WaitGroup
	for i := range subscribers {
		subs.Go(func() {
			s := h.Subscribe(strconv.Itoa(i % topics))
			defer s.Close()
			var buf [][]byte
			for range 10 {
				select {
				case <-s.Ready():
					buf, _ = s.Take(buf[:0], 16)
				case <-s.Done():
					return
				case <-stop:
					return
				}
			}
		})
	}
	var pubs sync.WaitGroup
	for i := range publishers {
		pubs.Go(func() {
			for j := range messages {
				h.Publish(strconv.Itoa((i+j)%topics), []byte("m"))
				if j%50 == 0 {
					h.Broadcast([]byte("status"))
					h.BroadcastLatestShare(tick, []byte("tick"), 3, uint64(j))
					h.PublishLatest(strconv.Itoa(j%topics), snapshot, []byte("snapshot"))
					_, _, _ = h.Count("0"), h.Topics(), h.Total()
				}
			}
		})
	}
	pubs.Wait()
	close(stop)
	subs.Wait()

	if h.Total() != 0 || len(h.Topics()) != 0 {
		t.Errorf("after all Close: Total %d, Topics %q; want empty", h.Total(), h.Topics())
	}
	for i := range topics {
		if _, ok := changes.Load(strconv.Itoa(i)); !ok {
			t.Errorf("OnChange never called for topic %d", i)
		}
	}
}

// TestNoLostWakeups: a reader that sleeps on Ready and takes in small frames gets
// every queued message in order, and in the end the very last state, however the
// publisher's steps interleave with its own.
func TestNoLostWakeups(t *testing.T) {
	h := hub.New[string]()
	s := h.Subscribe("a")
	const n = 20_000
	go func() {
		for i := 1; i <= n; i++ {
			v := []byte(strconv.Itoa(i))
			if i%3 == 0 {
				h.PublishLatest("a", tick, v)
			} else {
				h.Publish("a", v)
			}
		}
	}()
	wantQueued, wantTick := n, n-n%3 // the last of each sort published
	if n%3 == 0 {
		wantQueued = n - 1
	}
	lastQueued, lastTick := 0, 0
	deadline := time.After(failsafe)
	var buf [][]byte
	for lastQueued < wantQueued || lastTick < wantTick {
		select {
		case <-s.Ready():
		case <-deadline:
			t.Fatalf("stuck: last queued %d, last tick %d", lastQueued, lastTick)
		}
		for more := true; more; {
			buf, more = s.Take(buf[:0], 64)
			for _, m := range buf {
				v, _ := strconv.Atoi(string(m))
				switch {
				case v%3 == 0 && v <= lastTick:
					t.Fatalf("tick %d after %d: states went backwards", v, lastTick)
				case v%3 == 0:
					lastTick = v
				case v != lastQueued+1 && !(lastQueued%3 == 2 && v == lastQueued+2):
					t.Fatalf("queued %d after %d: a message was lost or reordered", v, lastQueued)
				default:
					lastQueued = v
				}
			}
		}
	}
}

func TestBroadcastLatestShareReachesEachInTurn(t *testing.T) {
	h := hub.New[string]()
	subs := make([]*sub, 7)
	for i := range subs {
		subs[i] = h.Subscribe(strconv.Itoa(i % 2))
	}
	got := make([]int, len(subs))
	for phase := range uint64(9) { // three full turns of three
		h.BroadcastLatestShare(tick, []byte("tick"), 3, phase)
		for i, s := range subs {
			got[i] += len(take(s))
		}
	}
	for i, n := range got {
		if n != 3 {
			t.Errorf("subscriber %d got %d ticks in 9 calls with every=3, want 3", i, n)
		}
	}
	h.BroadcastLatestShare(tick, []byte("tick"), 1, 5)
	for i, s := range subs {
		if n := len(take(s)); n != 1 {
			t.Errorf("every=1: subscriber %d got %d ticks, want 1", i, n)
		}
	}
}

func TestAudiencesCountEachWatchedTopic(t *testing.T) {
	h := hub.New[string]()
	a1, a2, b := h.Subscribe("a"), h.Subscribe("a"), h.Subscribe("b")
	b.Close()
	got := h.Audiences(nil)
	if len(got) != 1 || got[0].Topic != "a" || got[0].Count != 2 {
		t.Errorf("audiences %v, want only a with 2", got)
	}
	a1.Close()
	a2.Close()
	if got := h.Audiences(got[:0]); len(got) != 0 {
		t.Errorf("audiences %v after everyone left, want none", got)
	}
}

func TestPublishStatesShareReachesEachOfTheTopicInTurn(t *testing.T) {
	h := hub.New[string]()
	subs := make([]*sub, 8)
	for i := range subs {
		subs[i] = h.Subscribe("crowd")
	}
	other := h.Subscribe("other")
	got := make([]int, len(subs))
	for phase := range uint64(8) { // two full turns of four
		h.PublishStatesShare("crowd", 4, phase, hub.State{Kind: tick, Msg: []byte("snap")})
		n := 0
		for i, s := range subs {
			k := len(take(s))
			got[i] += k
			n += k
		}
		if n != 2 {
			t.Errorf("call %d reached %d of 8 subscribers with every=4, want 2", phase, n)
		}
	}
	for i, n := range got {
		if n != 2 {
			t.Errorf("subscriber %d got %d states in 8 calls with every=4, want 2", i, n)
		}
	}
	if n := len(take(other)); n != 0 {
		t.Errorf("a subscriber of another topic got %d states", n)
	}
}

// Publishing to a crowd that keeps up allocates nothing per subscriber: the queue
// keeps its slots between bursts.
func TestPublishDoesNotAllocate(t *testing.T) {
	h := hub.New[string]()
	subs := make([]*sub, 1000)
	for i := range subs {
		subs[i] = h.Subscribe("a")
	}
	msg := []byte("m")
	buf := make([][]byte, 0, 8)
	allocs := testing.AllocsPerRun(20, func() {
		h.Publish("a", msg)
		h.Broadcast(msg)
		h.PublishLatest("a", snapshot, msg)
		for _, s := range subs {
			select {
			case <-s.Ready():
			default:
				panic("no token for waiting messages")
			}
			buf, _ = s.Take(buf[:0], 1<<20)
		}
	})
	if allocs != 0 {
		t.Errorf("Publish+Broadcast+PublishLatest to 1000 subscribers, each taking: %v allocations, want 0", allocs)
	}
}

func TestLatestDoesNotAllocatePerSubscriber(t *testing.T) {
	h := hub.New[string]()
	subs := make([]*sub, 1000)
	for i := range subs {
		subs[i] = h.Subscribe(strconv.Itoa(i % 3))
	}
	msg := []byte("tick")
	allocs := testing.AllocsPerRun(20, func() {
		h.BroadcastLatest(tick, msg)
		h.BroadcastLatestShare(tick, msg, 4, 1)
		h.PublishLatest("1", viewers, msg)
	})
	if allocs != 0 {
		t.Errorf("latest messages to 1000 subscribers: %v allocations, want 0", allocs)
	}
}

func BenchmarkPublish10kSubscribers(b *testing.B) {
	h := hub.New[string]()
	subs := make([]*sub, 10_000)
	for i := range subs {
		subs[i] = h.Subscribe("window")
	}
	msg := []byte(`{"type":"decision"}`)
	var buf [][]byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%64 == 0 {
			// Drain outside the timer, so only the fan-out is measured.
			b.StopTimer()
			for _, s := range subs {
				buf, _ = s.Take(buf[:0], 1<<20)
			}
			b.StartTimer()
		}
		h.Publish("window", msg)
	}
	b.StopTimer()
	if got := h.Count("window"); got != len(subs) {
		b.Fatalf("%d subscribers left, want %d", got, len(subs))
	}
}

func Example() {
	h := hub.New[string]()
	defer h.Close()
	s := h.Subscribe("demo:alice")
	defer s.Close()

	h.Publish("demo:alice", []byte(`{"type":"decision"}`))
	h.PublishLatest("demo:alice", 0, []byte(`{"type":"tick","nowMs":1}`))
	h.PublishLatest("demo:alice", 0, []byte(`{"type":"tick","nowMs":2}`))
	h.Publish("demo:bob", []byte(`{"type":"reset"}`)) // nobody watches: dropped

	<-s.Ready()
	frame, more := s.Take(nil, 1<<20)
	for _, m := range frame {
		fmt.Println(string(m))
	}
	fmt.Println(more, h.Count("demo:alice"))
	// Output:
	// {"type":"decision"}
	// {"type":"tick","nowMs":2}
	// false 1
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// publishWithin fails the test if Publish blocks, instead of hanging it.
func publishWithin(t *testing.T, h *hub.Hub[string], topic, msg string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		h.Publish(topic, []byte(msg))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(failsafe):
		t.Fatalf("Publish(%q) blocked", msg)
	}
}

// take returns everything waiting for s.
func take(s *sub) []string {
	var out []string
	for more := true; more; {
		var got [][]byte
		got, more = s.Take(nil, 1<<20)
		out = append(out, strs(got)...)
	}
	return out
}

// assertMessages checks that exactly want waits for s, in order.
func assertMessages(t *testing.T, s *sub, want ...string) {
	t.Helper()
	if got := take(s); !slices.Equal(got, want) {
		if len(got) > 10 || len(want) > 10 {
			t.Fatalf("%s: got %d messages, want %d", s.Topic(), len(got), len(want))
		}
		t.Fatalf("%s: got %q, want %q", s.Topic(), got, want)
	}
}

// recorder collects OnChange calls as "topic=count".
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) record(topic string, count int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%s=%d", topic, count))
}

func (r *recorder) assert(t *testing.T, want ...string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.calls, want) {
		t.Errorf("OnChange calls = %q, want %q", r.calls, want)
	}
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// TestSubscribeFuncWakesOncePerEmptying: a subscription with a wake func is
// woken by the first message or state after a Take that emptied it, once,
// however many follow, and never gets a token on Ready.
func TestSubscribeFuncWakesOncePerEmptying(t *testing.T) {
	h := hub.New[string]()
	wakes := 0
	s := h.SubscribeFunc("a", func() { wakes++ })
	defer s.Close()
	h.Publish("a", []byte("1"))
	h.Publish("a", []byte("2"))
	h.PublishLatest("a", tick, []byte("t"))
	if wakes != 1 {
		t.Fatalf("woken %d times for three messages not yet taken; want 1", wakes)
	}
	if got, more := s.Take(nil, 1<<20); len(got) != 3 || more {
		t.Fatalf("took %q (more %v); want 1, 2 and the tick", got, more)
	}
	h.Publish("a", []byte("3"))
	if wakes != 2 {
		t.Fatalf("woken %d times after a message that followed an emptying Take; want 2", wakes)
	}
	select {
	case <-s.Ready():
		t.Fatal("a subscription with a wake func got a token on Ready")
	default:
	}
}
