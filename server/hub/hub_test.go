package hub_test

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratescope/ratescope/server/hub"
)

// failsafe bounds waits that only a bug could make long; no test relies on timing.
const failsafe = 10 * time.Second

func TestPublishReachesOnlyTopicSubscribers(t *testing.T) {
	h := hub.New()
	a1, a2, b := h.Subscribe("a"), h.Subscribe("a"), h.Subscribe("b")

	h.Publish("a", []byte("hello"))
	h.Publish("nobody", []byte("lost"))

	for _, s := range []*hub.Subscription{a1, a2} {
		assertMessages(t, s, "hello")
	}
	assertEmpty(t, b)
	if got := h.Count("a"); got != 2 {
		t.Errorf("Count(a) = %d, want 2", got)
	}
	if got, want := h.Topics(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Errorf("Topics() = %q, want %q", got, want)
	}
	if got := h.Total(); got != 3 {
		t.Errorf("Total() = %d, want 3", got)
	}
	if a1.Topic() != "a" || b.Topic() != "b" {
		t.Errorf("Topic() = %q, %q, want a, b", a1.Topic(), b.Topic())
	}
}

func TestPublishPreservesOrder(t *testing.T) {
	h := hub.New()
	s := h.Subscribe("a")
	var want []string
	for i := range hub.DefaultBuffer {
		want = append(want, strconv.Itoa(i))
		h.Publish("a", []byte(want[i]))
	}
	assertMessages(t, s, want...)
	if err := s.Err(); err != nil {
		t.Errorf("Err() = %v after a full but not overflowing buffer, want nil", err)
	}
}

func TestBroadcastReachesEveryTopic(t *testing.T) {
	h := hub.New()
	subs := []*hub.Subscription{h.Subscribe("a"), h.Subscribe("a"), h.Subscribe("b"), h.Subscribe("c")}

	h.Broadcast([]byte("tick"))

	for _, s := range subs {
		assertMessages(t, s, "tick")
	}
}

func TestSlowSubscriberIsDroppedWithoutHoldingOthersBack(t *testing.T) {
	const buffer = 4
	h := hub.New(hub.WithBuffer(buffer))
	slow, fast := h.Subscribe("a"), h.Subscribe("a")

	// The fast subscriber reads after every publish; the slow one never reads.
	for i := range buffer + 3 {
		msg := strconv.Itoa(i)
		publishWithin(t, h, "a", msg)
		assertMessages(t, fast, msg)
		var want error // kept for buffer messages, dropped by the next
		if i >= buffer {
			want = hub.ErrSlow
		}
		if err := slow.Err(); err != want {
			t.Fatalf("after %d messages: slow.Err() = %v, want %v", i+1, err, want)
		}
	}

	select {
	case <-slow.Done():
	default:
		t.Fatal("slow subscriber's Done not closed")
	}
	if err := slow.Err(); err != hub.ErrSlow {
		t.Errorf("slow.Err() = %v, want ErrSlow", err)
	}
	if err := fast.Err(); err != nil {
		t.Errorf("fast.Err() = %v, want nil", err)
	}
	if got := h.Count("a"); got != 1 {
		t.Errorf("Count(a) = %d, want 1", got)
	}
	// What was queued before the drop is still readable; nothing after it arrives.
	assertMessages(t, slow, "0", "1", "2", "3")
	slow.Close()
	if err := slow.Err(); err != hub.ErrSlow {
		t.Errorf("Err() after Close of a dropped subscription = %v, want ErrSlow", err)
	}
}

func TestSubscriptionCloseIsIdempotent(t *testing.T) {
	rec := &recorder{}
	h := hub.New(hub.WithOnChange(rec.record))
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
	assertEmpty(t, s)
	assertMessages(t, other, "after")
	rec.assert(t, "a=1", "a=2", "a=1")

	other.Close()
	if got := h.Topics(); len(got) != 0 {
		t.Errorf("Topics() = %q after last Close, want none", got)
	}
}

func TestOnChangeCounts(t *testing.T) {
	rec := &recorder{}
	h := hub.New(hub.WithBuffer(1), hub.WithOnChange(rec.record))

	a1 := h.Subscribe("a")
	h.Subscribe("a")
	b := h.Subscribe("b")
	a1.Close()
	h.Publish("b", []byte("1"))
	h.Publish("b", []byte("2")) // b never reads: dropped
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
	h := hub.New(hub.WithOnChange(rec.record))
	a, b := h.Subscribe("a"), h.Subscribe("b")

	h.Close()
	h.Close()

	for _, s := range []*hub.Subscription{a, b} {
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
	h := hub.New(hub.WithBuffer(8), hub.WithOnChange(func(topic string, _ int) { changes.Store(topic, struct{}{}) }))
	stop := make(chan struct{})

	var subs sync.WaitGroup
	for i := range subscribers {
		subs.Go(func() {
			s := h.Subscribe(strconv.Itoa(i % topics))
			defer s.Close()
			for range 10 {
				select {
				case <-s.C():
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
					h.Broadcast([]byte("tick"))
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

func TestPublishDoesNotAllocate(t *testing.T) {
	h := hub.New()
	subs := make([]*hub.Subscription, 1000)
	for i := range subs {
		subs[i] = h.Subscribe("a")
	}
	msg := []byte("m")
	allocs := testing.AllocsPerRun(20, func() {
		h.Publish("a", msg)
		h.Broadcast(msg)
	})
	if allocs != 0 {
		t.Errorf("Publish+Broadcast to 1000 subscribers: %v allocations, want 0", allocs)
	}
}

func BenchmarkPublish10kSubscribers(b *testing.B) {
	h := hub.New()
	subs := make([]*hub.Subscription, 10_000)
	for i := range subs {
		subs[i] = h.Subscribe("window")
	}
	msg := []byte(`{"type":"decision"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i > 0 && i%hub.DefaultBuffer == 0 {
			// Drain outside the timer, so only the fan-out is measured and no one is dropped.
			b.StopTimer()
			for _, s := range subs {
				for len(s.C()) > 0 {
					<-s.C()
				}
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
	h := hub.New()
	defer h.Close()
	s := h.Subscribe("demo:alice")
	defer s.Close()

	h.Publish("demo:alice", []byte(`{"type":"reset"}`))
	h.Publish("demo:bob", []byte(`{"type":"reset"}`)) // nobody watches: dropped

	select {
	case msg := <-s.C():
		fmt.Println(string(msg), h.Count("demo:alice"))
	case <-s.Done():
		fmt.Println(s.Err())
	}
	// Output: {"type":"reset"} 1
}

// publishWithin fails the test if Publish blocks, instead of hanging it.
func publishWithin(t *testing.T, h *hub.Hub, topic, msg string) {
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

// assertMessages reads len(want) messages from s, which must already be queued, then
// checks that nothing more is.
func assertMessages(t *testing.T, s *hub.Subscription, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-s.C():
			if string(got) != w {
				t.Fatalf("%s: got %q, want %q", s.Topic(), got, w)
			}
		default:
			t.Fatalf("%s: no message queued, want %q", s.Topic(), w)
		}
	}
	assertEmpty(t, s)
}

func assertEmpty(t *testing.T, s *hub.Subscription) {
	t.Helper()
	if n := len(s.C()); n != 0 {
		t.Fatalf("%s: %d unexpected messages queued", s.Topic(), n)
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

func TestLatestKeepsOnlyTheNewestOfEachKind(t *testing.T) {
	h := hub.New(hub.WithBuffer(2))
	a, b := h.Subscribe("a"), h.Subscribe("b")
	const tick, viewers hub.Kind = 0, 1

	// Far more than the buffer holds: "latest" messages never fill it.
	for i := range 10 * hub.DefaultBuffer {
		h.BroadcastLatest(tick, []byte("tick "+strconv.Itoa(i)))
	}
	h.PublishLatest("a", viewers, []byte("viewers 1"))
	h.PublishLatest("a", viewers, []byte("viewers 2"))
	h.PublishLatest("nobody", viewers, []byte("lost"))
	h.Publish("a", []byte("decision"))

	for _, s := range []*hub.Subscription{a, b} {
		if err := s.Err(); err != nil {
			t.Fatalf("Err() = %v after many latest messages, want nil", err)
		}
		select {
		case <-s.Pending():
		default:
			t.Fatalf("Pending() has no token after latest messages")
		}
	}
	last := "tick " + strconv.Itoa(10*hub.DefaultBuffer-1)
	if got := strs(a.Latest(nil)); !slices.Equal(got, []string{last, "viewers 2"}) {
		t.Errorf("a.Latest() = %q, want [%q viewers 2]", got, last)
	}
	if got := strs(b.Latest(nil)); !slices.Equal(got, []string{last}) {
		t.Errorf("b.Latest() = %q, want [%q]", got, last)
	}
	if got := a.Latest(nil); len(got) != 0 {
		t.Errorf("second Latest() = %q, want nothing: each message is taken once", got)
	}
	assertMessages(t, a, "decision") // queued messages are untouched
	assertEmpty(t, b)

	// A message offered after the token was taken raises a new one.
	h.BroadcastLatest(tick, []byte("tick again"))
	select {
	case <-a.Pending():
	default:
		t.Fatal("Pending() has no token for a message offered after Latest")
	}
	if got := strs(a.Latest(nil)); !slices.Equal(got, []string{"tick again"}) {
		t.Errorf("a.Latest() = %q, want [tick again]", got)
	}
}

func TestLatestIsNeverLostUnderConcurrency(t *testing.T) {
	h := hub.New()
	s := h.Subscribe("a")
	const n = 20_000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= n; i++ {
			h.PublishLatest("a", 2, []byte(strconv.Itoa(i)))
		}
	}()
	// The reader sees increasing values and, in the end, the very last one.
	last := 0
	deadline := time.After(failsafe)
	for last < n {
		select {
		case <-s.Pending():
		case <-deadline:
			t.Fatalf("the last message never arrived; last seen %d", last)
		}
		for _, m := range s.Latest(nil) {
			v, _ := strconv.Atoi(string(m))
			if v <= last {
				t.Fatalf("got %d after %d: latest messages went backwards", v, last)
			}
			last = v
		}
	}
	<-done
}

func TestLatestDoesNotAllocatePerSubscriber(t *testing.T) {
	h := hub.New()
	subs := make([]*hub.Subscription, 1000)
	for i := range subs {
		subs[i] = h.Subscribe(strconv.Itoa(i % 3))
	}
	msg := []byte("tick")
	allocs := testing.AllocsPerRun(20, func() {
		h.BroadcastLatest(0, msg)
		h.PublishLatest("1", 1, msg)
	})
	if allocs > 2 {
		t.Errorf("BroadcastLatest+PublishLatest to 1000 subscribers: %v allocations, want at most 2", allocs)
	}
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}
