// Package hub fans out already-encoded messages to the subscribers of a topic.
//
// It knows nothing of WebSockets, HTTP or Redis: the stream handler subscribes to a
// window's topic and writes whatever arrives, so the fan-out can be tested with plain
// channels. Publishing never blocks; a subscriber that falls behind is dropped rather
// than allowed to hold the others back.
//
// Messages come in two sorts. Queued ones (Publish, Broadcast) each reach every
// subscriber, in order. "Latest" ones (PublishLatest, BroadcastLatest) are states
// that a newer message of the same kind supersedes — a clock tick, a viewer count:
// each subscriber holds at most one of each kind, and a newer one replaces it
// unread. They never fill a buffer, so a busy machine sends fewer ticks instead of
// queueing decisions behind stale ones.
package hub

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Kind names a sort of "latest" message, 0 to Kinds-1.
type Kind uint8

// Kinds is how many kinds of "latest" message a subscription holds.
const Kinds = 4

// DefaultBuffer is the per-subscriber queue length. It absorbs a burst of decisions
// between two writes to a socket; a viewer further behind than that is dropped.
const DefaultBuffer = 64

var (
	// ErrSlow is reported by a Subscription dropped because its buffer was full.
	ErrSlow = errors.New("hub: subscriber fell behind")
	// ErrClosed is reported by a Subscription closed by its owner or by Hub.Close.
	ErrClosed = errors.New("hub: closed")
)

// Hub is a per-topic fan-out. The zero value is not usable; call New.
type Hub struct {
	buffer   int
	onChange func(topic string, count int)

	mu     sync.Mutex
	topics map[string]map[*Subscription]struct{} // no empty inner maps
	total  int
	closed bool
}

// Option configures a Hub.
type Option func(*Hub)

// WithBuffer sets the per-subscriber queue length, so tests can make a subscriber slow
// after a handful of messages. Values below 1 are treated as 1.
func WithBuffer(n int) Option {
	return func(h *Hub) { h.buffer = max(n, 1) }
}

// WithOnChange registers fn, called with a topic and its new subscriber count whenever a
// subscription is added or removed (including a slow drop and Hub.Close), so the server
// can keep viewer counts without polling. fn runs outside the hub's lock, on whichever
// goroutine made the change, so it may call back into the hub. Concurrent changes may be
// reported out of order; a consumer that needs the exact figure re-reads Count.
func WithOnChange(fn func(topic string, count int)) Option {
	return func(h *Hub) { h.onChange = fn }
}

// New returns an empty Hub.
func New(opts ...Option) *Hub {
	h := &Hub{buffer: DefaultBuffer, topics: make(map[string]map[*Subscription]struct{})}
	for _, opt := range opts {
		opt(h)
	}
	return h
}

// Subscribe adds a subscriber to topic. After Close it returns a subscription that is
// already done with ErrClosed, so callers need no separate check.
func (h *Hub) Subscribe(topic string) *Subscription {
	s := &Subscription{hub: h, topic: topic, c: make(chan []byte, h.buffer), done: make(chan struct{}), pending: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		s.finish(ErrClosed)
		return s
	}
	subs := h.topics[topic]
	if subs == nil {
		subs = make(map[*Subscription]struct{})
		h.topics[topic] = subs
	}
	subs[s] = struct{}{}
	h.total++
	n := len(subs)
	h.mu.Unlock()
	h.notify(topic, n)
	return s
}

// Publish sends msg to every subscriber of topic. It never blocks: a subscriber whose
// buffer is full is removed and marked slow. msg is shared by all subscribers and must
// not be modified afterwards. A topic nobody watches costs one map lookup.
func (h *Hub) Publish(topic string, msg []byte) {
	h.mu.Lock()
	subs := h.topics[topic]
	if len(subs) == 0 {
		h.mu.Unlock()
		return
	}
	dropped := h.send(topic, subs, msg)
	n := len(subs)
	h.mu.Unlock()
	if dropped {
		h.notify(topic, n)
	}
}

// Broadcast sends msg to every subscriber of every topic, so one encoded clock tick
// serves all viewers. Slow subscribers are dropped as in Publish.
func (h *Hub) Broadcast(msg []byte) {
	type change struct {
		topic string
		n     int
	}
	var changed []change // allocated only when someone is dropped
	h.mu.Lock()
	for topic, subs := range h.topics {
		if h.send(topic, subs, msg) {
			changed = append(changed, change{topic, len(subs)})
		}
	}
	h.mu.Unlock()
	for _, c := range changed {
		h.notify(c.topic, c.n)
	}
}

// PublishLatest offers msg, of kind k, to every subscriber of topic in place of
// any message of that kind it has not taken yet. It never blocks and never drops
// a subscriber. msg is shared and must not be modified afterwards.
func (h *Hub) PublishLatest(topic string, k Kind, msg []byte) {
	p := &msg // one pointer shared by all, so offering allocates nothing per subscriber
	h.mu.Lock()
	for s := range h.topics[topic] {
		s.offer(k, p)
	}
	h.mu.Unlock()
}

// BroadcastLatest is PublishLatest to every subscriber of every topic, so one
// encoded clock tick serves all viewers.
func (h *Hub) BroadcastLatest(k Kind, msg []byte) {
	p := &msg
	h.mu.Lock()
	for _, subs := range h.topics {
		for s := range subs {
			s.offer(k, p)
		}
	}
	h.mu.Unlock()
}

// send delivers msg to subs without blocking and reports whether any subscriber was
// dropped. It must be called with h.mu held; it closes no channel but Done, so a
// dropped subscriber's reader never races a send.
func (h *Hub) send(topic string, subs map[*Subscription]struct{}, msg []byte) bool {
	dropped := false
	for s := range subs {
		select {
		case s.c <- msg:
		default:
			h.removeLocked(topic, subs, s)
			s.finish(ErrSlow)
			dropped = true
		}
	}
	return dropped
}

// removeLocked deletes s from subs, and the topic once it has no subscribers, so Topics
// and Broadcast never visit dead topics. h.mu must be held.
func (h *Hub) removeLocked(topic string, subs map[*Subscription]struct{}, s *Subscription) {
	delete(subs, s)
	h.total--
	if len(subs) == 0 {
		delete(h.topics, topic)
	}
}

func (h *Hub) notify(topic string, n int) {
	if h.onChange != nil {
		h.onChange(topic, n)
	}
}

// Count returns the number of subscribers of topic.
func (h *Hub) Count(topic string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.topics[topic])
}

// Topics returns the topics with at least one subscriber, sorted.
func (h *Hub) Topics() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.topics))
}

// Total returns the number of subscribers across all topics.
func (h *Hub) Total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Close drops every subscriber with ErrClosed and reports each topic's count as 0, so
// viewer counts go to zero on shutdown. Later Subscribe calls return closed
// subscriptions. Close is idempotent.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	topics := slices.Sorted(maps.Keys(h.topics))
	for _, subs := range h.topics {
		for s := range subs {
			s.finish(ErrClosed)
		}
	}
	clear(h.topics)
	h.total = 0
	h.mu.Unlock()
	for _, topic := range topics {
		h.notify(topic, 0)
	}
}

// Subscription is one subscriber's view of a topic.
type Subscription struct {
	hub   *Hub
	topic string
	c     chan []byte
	done  chan struct{}
	once  sync.Once
	err   error // written once, before done is closed

	latest  [Kinds]atomic.Pointer[[]byte]
	armed   atomic.Bool   // a token is in pending, or about to be
	pending chan struct{} // holds a token while some latest slot may be full
}

// offer fills a slot and makes sure a token announces it. armed, not the
// channel's fullness, decides who sends: a failed non-blocking send orders
// nothing, so "the channel is full" could be seen before the reader took the
// token and emptied the slots without this message. With armed, either this
// Swap comes before the reader's Store(false) — and so does the slot store,
// which the reader's Swaps then see — or it comes after and sends a new token.
func (s *Subscription) offer(k Kind, msg *[]byte) {
	s.latest[k%Kinds].Store(msg)
	if !s.armed.Swap(true) {
		select {
		case s.pending <- struct{}{}:
		default: // a token not yet taken: Latest was called without one
		}
	}
}

// Pending receives when "latest" messages may be waiting; call Latest then. It is
// a hint: Latest may find them taken already by an earlier call.
func (s *Subscription) Pending() <-chan struct{} { return s.pending }

// Latest takes the waiting "latest" messages, in Kind order, appending them to
// dst. Each is returned once.
func (s *Subscription) Latest(dst [][]byte) [][]byte {
	s.armed.Store(false)
	for i := range s.latest {
		if m := s.latest[i].Swap(nil); m != nil {
			dst = append(dst, *m)
		}
	}
	return dst
}

// C returns the messages, in publish order. It is never closed, so the hub can never
// send on a closed channel; wait on Done as well.
func (s *Subscription) C() <-chan []byte { return s.c }

// Done is closed once the subscription ends: dropped as slow, closed by its owner, or
// closed with the hub. Messages already in C may still be read after that.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err returns nil while the subscription is active, ErrSlow if it was dropped for
// falling behind, and ErrClosed if it was closed by its owner or by Hub.Close.
func (s *Subscription) Err() error {
	select {
	case <-s.done:
		return s.err // the close of done orders this read after the write in finish
	default:
		return nil
	}
}

// Topic returns the topic subscribed to.
func (s *Subscription) Topic() string { return s.topic }

// Close removes the subscription from the hub and closes Done. It is idempotent and
// safe to call after a drop or Hub.Close.
func (s *Subscription) Close() {
	h := s.hub
	h.mu.Lock()
	subs := h.topics[s.topic]
	_, ok := subs[s]
	if ok {
		h.removeLocked(s.topic, subs, s)
	}
	n := len(subs)
	h.mu.Unlock()
	s.finish(ErrClosed)
	if ok {
		h.notify(s.topic, n)
	}
}

// finish records why the subscription ended and closes Done, the first time only.
func (s *Subscription) finish(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
	})
}
