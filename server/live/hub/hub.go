// Package hub fans out already-encoded messages to the subscribers of a topic.
//
// It knows nothing of WebSockets, HTTP or Redis: the stream writer subscribes to a
// window's topic and writes whatever it takes, so the fan-out can be tested without a
// network. Publishing never blocks; a subscriber that falls behind is dropped rather
// than allowed to hold the others back.
//
// Messages come in two sorts. Queued ones (Publish, Broadcast) each reach every
// subscriber, in order: nothing is ever dropped for a subscriber that stays. "Latest"
// ones (PublishLatest, BroadcastLatest) are states that a newer message of the same
// kind supersedes — a clock tick, a viewer count, a snapshot: each subscriber holds at
// most one of each kind, and a newer one replaces it unread. They never fill a queue,
// so a busy machine sends fewer states instead of queueing events behind stale ones.
//
// Falling behind is measured in bytes and time, never in a count of messages: a
// subscriber is dropped when what is queued for it exceeds a byte budget or the oldest
// message queued for it has waited longer than an age limit (SPEC §4: 4 MiB, 5 s).
package hub

import (
	"errors"
	"sync"
	"time"
)

// Kind names a sort of "latest" message. Kinds are small numbers chosen by
// the publisher (0, 1, 2…): a subscription holds one slot per kind offered.
type Kind uint8

// Default limits of one subscriber's queue (SPEC §4).
const (
	DefaultMaxBytes = 4 << 20
	DefaultMaxAge   = 5 * time.Second
)

// keepQueue is the most queue slots a drained subscription keeps for the next burst;
// a larger queue is let go once empty, so memory returns after a burst.
const keepQueue = 256

var (
	// ErrSlow is reported by a Subscription dropped because it fell behind.
	ErrSlow = errors.New("hub: subscriber fell behind")
	// ErrClosed is reported by a Subscription closed by its owner or by Hub.Close.
	ErrClosed = errors.New("hub: closed")
)

// Hub is a per-topic fan-out; T identifies a topic (the live view uses a window's
// key and policy). The zero value is not usable; call New.
type Hub[T comparable] struct {
	maxBytes int
	maxAge   time.Duration
	now      func() time.Time
	epoch    time.Time
	onChange func(topic T, count int)

	mu     sync.Mutex
	topics map[T]map[*Subscription[T]]struct{} // no empty inner maps
	total  int
	seq    uint64 // numbers subscriptions, for BroadcastLatestShare
	closed bool
}

// Option configures a Hub of topics of type T.
type Option[T comparable] func(*options[T])

type options[T comparable] struct {
	maxBytes int
	maxAge   time.Duration
	now      func() time.Time
	onChange func(topic T, count int)
}

// WithLimits sets how far a subscriber may fall behind before it is dropped: more
// than maxBytes queued, or a queued message older than maxAge. Values below 1 keep
// the default.
func WithLimits[T comparable](maxBytes int, maxAge time.Duration) Option[T] {
	return func(o *options[T]) {
		if maxBytes > 0 {
			o.maxBytes = maxBytes
		}
		if maxAge > 0 {
			o.maxAge = maxAge
		}
	}
}

// WithClock replaces time.Now for measuring how long messages wait, for tests.
func WithClock[T comparable](now func() time.Time) Option[T] {
	return func(o *options[T]) { o.now = now }
}

// WithOnChange registers fn, called with a topic and its new subscriber count whenever
// a subscription is added or removed (including a slow drop and Hub.Close), so viewer
// counts need no polling. fn runs outside the hub's lock, on whichever goroutine made
// the change, so it may call back into the hub. Concurrent changes may be reported
// out of order; a consumer that needs the exact figure re-reads Count.
func WithOnChange[T comparable](fn func(topic T, count int)) Option[T] {
	return func(o *options[T]) { o.onChange = fn }
}

// New returns an empty Hub.
func New[T comparable](opts ...Option[T]) *Hub[T] {
	o := options[T]{maxBytes: DefaultMaxBytes, maxAge: DefaultMaxAge, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	h := &Hub[T]{
		maxBytes: o.maxBytes, maxAge: o.maxAge, now: o.now,
		topics: make(map[T]map[*Subscription[T]]struct{}), onChange: o.onChange,
	}
	h.epoch = h.now()
	return h
}

// Subscribe adds a subscriber to topic. After Close it returns a subscription that is
// already done with ErrClosed, so callers need no separate check.
func (h *Hub[T]) Subscribe(topic T) *Subscription[T] {
	return h.subscribe(topic, nil)
}

// SubscribeFunc is Subscribe for a reader that is not a goroutine of its own:
// wake is called, in place of a token on Ready, whenever messages may be
// waiting, and Take then finds them (or a later call does: like a token, a
// call is a hint). wake runs on the publisher's goroutine, with the hub's lock
// held, so it must be quick and must not call back into the hub: it hands the
// subscription to whoever takes from it. Once it has been called, it is not
// called again until a Take has emptied everything.
func (h *Hub[T]) SubscribeFunc(topic T, wake func()) *Subscription[T] {
	return h.subscribe(topic, wake)
}

func (h *Hub[T]) subscribe(topic T, wake func()) *Subscription[T] {
	s := &Subscription[T]{hub: h, topic: topic, ready: make(chan struct{}, 1), done: make(chan struct{}), onWake: wake}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		s.finish(ErrClosed)
		return s
	}
	subs := h.topics[topic]
	if subs == nil {
		subs = make(map[*Subscription[T]]struct{})
		h.topics[topic] = subs
	}
	subs[s] = struct{}{}
	h.total++
	h.seq++
	s.seq = h.seq
	n := len(subs)
	h.mu.Unlock()
	h.notify(topic, n)
	return s
}

// clock is how long the hub has run: the time stamp of a queued message.
func (h *Hub[T]) clock() time.Duration { return h.now().Sub(h.epoch) }

// Publish queues msg for every subscriber of topic. It never blocks: a subscriber
// that has fallen behind is dropped instead. msg is shared by all subscribers and
// must not be modified afterwards. A topic nobody watches costs one map lookup.
func (h *Hub[T]) Publish(topic T, msg []byte) {
	h.mu.Lock()
	subs := h.topics[topic]
	if len(subs) == 0 {
		h.mu.Unlock()
		return
	}
	now := h.clock()
	dropped := false
	for s := range subs {
		if !s.push(msg, now) {
			h.drop(topic, subs, s)
			dropped = true
		}
	}
	n := len(subs)
	h.mu.Unlock()
	if dropped {
		h.notify(topic, n)
	}
}

// Broadcast queues msg for every subscriber of every topic, so one encoded message
// serves all viewers. Subscribers that have fallen behind are dropped as in Publish.
func (h *Hub[T]) Broadcast(msg []byte) {
	h.each(func(s *Subscription[T], now time.Duration) bool { return s.push(msg, now) })
}

// State is one "latest" message: its kind and its encoded bytes.
type State struct {
	Kind Kind
	Msg  []byte
}

// PublishLatest offers msg, of kind k, to every subscriber of topic in place of any
// message of that kind it has not taken yet. It never blocks. msg is shared and must
// not be modified afterwards. A subscriber whose queue has grown too old is dropped.
func (h *Hub[T]) PublishLatest(topic T, k Kind, msg []byte) {
	h.PublishStates(topic, State{Kind: k, Msg: msg})
}

// PublishStates is PublishLatest of several states at once: a subscriber is woken
// once for all of them and takes them together, in one frame.
func (h *Hub[T]) PublishStates(topic T, states ...State) {
	h.PublishStatesShare(topic, 1, 0, states...)
}

// PublishStatesShare is PublishStates to one subscriber of topic in every `every`:
// those numbered phase modulo every. Called with phase 0, 1, 2… it reaches each
// subscriber once per `every` calls, so a large audience can take a state in
// turns instead of all at once. every below 2 means everyone.
func (h *Hub[T]) PublishStatesShare(topic T, every, phase uint64, states ...State) {
	if len(states) == 0 {
		return
	}
	every = max(every, 1)
	phase %= every
	h.mu.Lock()
	subs := h.topics[topic]
	if len(subs) == 0 {
		h.mu.Unlock()
		return
	}
	now := h.clock()
	dropped := false
	for s := range subs {
		if s.seq%every == phase && !s.offer(states, now) {
			h.drop(topic, subs, s)
			dropped = true
		}
	}
	n := len(subs)
	h.mu.Unlock()
	if dropped {
		h.notify(topic, n)
	}
}

// BroadcastLatest is PublishLatest to every subscriber of every topic, so one
// encoded clock tick serves all viewers.
func (h *Hub[T]) BroadcastLatest(k Kind, msg []byte) {
	states := []State{{Kind: k, Msg: msg}}
	h.each(func(s *Subscription[T], now time.Duration) bool { return s.offer(states, now) })
}

// BroadcastLatestShare is BroadcastLatest to one subscriber in every `every`: those
// numbered phase modulo every. Called with phase 0, 1, 2… it reaches each subscriber
// once per `every` calls, so a clock can serve a large audience in turns. every below
// 2 means everyone.
func (h *Hub[T]) BroadcastLatestShare(k Kind, msg []byte, every, phase uint64) {
	if every < 2 {
		h.BroadcastLatest(k, msg)
		return
	}
	phase %= every
	states := []State{{Kind: k, Msg: msg}}
	h.each(func(s *Subscription[T], now time.Duration) bool {
		return s.seq%every != phase || s.offer(states, now)
	})
}

// each calls fn for every subscriber, dropping those for which it reports false.
func (h *Hub[T]) each(fn func(s *Subscription[T], now time.Duration) bool) {
	type change struct {
		topic T
		n     int
	}
	var changed []change // allocated only when someone is dropped
	h.mu.Lock()
	now := h.clock()
	for topic, subs := range h.topics {
		dropped := false
		for s := range subs {
			if !fn(s, now) {
				h.drop(topic, subs, s)
				dropped = true
			}
		}
		if dropped {
			changed = append(changed, change{topic, len(subs)})
		}
	}
	h.mu.Unlock()
	for _, c := range changed {
		h.notify(c.topic, c.n)
	}
}

// drop removes a subscriber that fell behind. h.mu must be held.
func (h *Hub[T]) drop(topic T, subs map[*Subscription[T]]struct{}, s *Subscription[T]) {
	h.removeLocked(topic, subs, s)
	s.finish(ErrSlow)
}

// removeLocked deletes s from subs, and the topic once it has no subscribers, so
// Topics and Broadcast never visit dead topics. h.mu must be held.
func (h *Hub[T]) removeLocked(topic T, subs map[*Subscription[T]]struct{}, s *Subscription[T]) {
	delete(subs, s)
	h.total--
	if len(subs) == 0 {
		delete(h.topics, topic)
	}
}

func (h *Hub[T]) notify(topic T, n int) {
	if h.onChange != nil {
		h.onChange(topic, n)
	}
}

// Count returns the number of subscribers of topic.
func (h *Hub[T]) Count(topic T) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.topics[topic])
}

// Topics returns the topics with at least one subscriber, in no particular order.
func (h *Hub[T]) Topics() []T {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]T, 0, len(h.topics))
	for topic := range h.topics {
		out = append(out, topic)
	}
	return out
}

// Audience is a topic and its number of subscribers.
type Audience[T comparable] struct {
	Topic T
	Count int
}

// Audiences appends every topic with at least one subscriber, and its count,
// to dst and returns it: one lock for what Topics and a Count per topic would
// take one each for.
func (h *Hub[T]) Audiences(dst []Audience[T]) []Audience[T] {
	h.mu.Lock()
	defer h.mu.Unlock()
	for topic, subs := range h.topics {
		dst = append(dst, Audience[T]{topic, len(subs)})
	}
	return dst
}

// Total returns the number of subscribers across all topics.
func (h *Hub[T]) Total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Close drops every subscriber with ErrClosed and reports each topic's count as 0, so
// viewer counts go to zero on shutdown. Later Subscribe calls return closed
// subscriptions. Close is idempotent.
func (h *Hub[T]) Close() {
	h.mu.Lock()
	h.closed = true
	topics := make([]T, 0, len(h.topics))
	for topic, subs := range h.topics {
		topics = append(topics, topic)
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
