package hub

import (
	"sync"
	"time"
)

// Subscription is one subscriber's view of a topic: a queue of messages in publish
// order, one slot per kind of "latest" message, and a wake-up token.
type Subscription[T comparable] struct {
	hub    *Hub[T]
	topic  T
	seq    uint64
	ready  chan struct{} // holds a token while something may be waiting
	onWake func()        // called instead of sending a token (SubscribeFunc)
	done   chan struct{}
	once   sync.Once
	err    error // written once, before done is closed

	mu       sync.Mutex
	queue    []queued // queue[head:] waits, oldest first
	head     int
	bytes    int      // of the messages in queue[head:]
	latest   [][]byte // by Kind; grown when a kind is first offered
	signaled bool     // a token was sent and Take has not yet emptied everything
	ended    bool     // dropped or closed: accepts nothing more
}

type queued struct {
	msg []byte
	at  time.Duration // the hub's clock when it was queued
}

// push queues msg; it reports false when the subscriber has fallen behind (the
// message would take it past the byte budget, or its oldest message is too old),
// and then lets go of everything queued. The hub's lock is held.
func (s *Subscription[T]) push(msg []byte, now time.Duration) bool {
	h := s.hub
	s.mu.Lock()
	if s.ended { // already dropped or closed; the hub no longer lists it
		s.mu.Unlock()
		return true
	}
	if s.bytes+len(msg) > h.maxBytes || s.tooOld(now) {
		s.release()
		s.mu.Unlock()
		return false
	}
	if len(s.queue) == cap(s.queue) && s.head > 0 { // reuse the space already taken
		n := copy(s.queue, s.queue[s.head:])
		clear(s.queue[n:])
		s.queue, s.head = s.queue[:n], 0
	}
	s.queue = append(s.queue, queued{msg: msg, at: now})
	s.bytes += len(msg)
	wake := s.arm()
	s.mu.Unlock()
	if wake {
		s.wake()
	}
	return true
}

// offer puts each state in the slot of its kind, replacing what waits there,
// and wakes the reader once; like push it reports false when the queue has
// grown too old. The hub's lock is held.
func (s *Subscription[T]) offer(states []State, now time.Duration) bool {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return true
	}
	if s.tooOld(now) {
		s.release()
		s.mu.Unlock()
		return false
	}
	for _, st := range states {
		if int(st.Kind) >= len(s.latest) {
			s.latest = append(s.latest, make([][]byte, int(st.Kind)+1-len(s.latest))...)
		}
		s.latest[st.Kind] = st.Msg
	}
	wake := s.arm()
	s.mu.Unlock()
	if wake {
		s.wake()
	}
	return true
}

// tooOld reports whether the oldest queued message has waited past the limit.
// s.mu must be held.
func (s *Subscription[T]) tooOld(now time.Duration) bool {
	return s.head < len(s.queue) && now-s.queue[s.head].at > s.hub.maxAge
}

// arm records that a token is owed and reports whether this caller must send it.
// Because the flag and the messages change under one lock, and Take clears the flag
// only when it empties everything, a message is never left without a token: either
// Take ran before this (and the flag was clear, so a token goes out now) or it runs
// after and sees the message. s.mu must be held.
func (s *Subscription[T]) arm() bool {
	if s.signaled {
		return false
	}
	s.signaled = true
	return true
}

func (s *Subscription[T]) wake() {
	if s.onWake != nil {
		s.onWake()
		return
	}
	select {
	case s.ready <- struct{}{}:
	default: // a token not yet taken: the reader will come round anyway
	}
}

// release lets go of everything waiting and accepts nothing more. s.mu must be held.
func (s *Subscription[T]) release() {
	s.ended = true
	s.queue, s.head, s.bytes = nil, 0, 0
	s.latest = nil
}

// Ready receives a token when messages may be waiting; call Take then. It is a hint:
// Take may find nothing, taken already by an earlier call.
func (s *Subscription[T]) Ready() <-chan struct{} { return s.ready }

// Take moves waiting messages to dst and returns it: queued messages first, in
// publish order, as many as fit in max bytes (at least one); then, once no queued
// message is left, the latest states in Kind order, if they fit too. more reports
// that messages are left for another call, which needs no new token.
func (s *Subscription[T]) Take(dst [][]byte, max int) (_ [][]byte, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	size := 0
	i := s.head
	for ; i < len(s.queue); i++ {
		m := s.queue[i].msg
		if size > 0 && size+len(m) > max {
			break
		}
		size += len(m)
		dst = append(dst, m)
	}
	clear(s.queue[s.head:i]) // the taken messages are the writer's now
	s.bytes -= size
	s.head = i
	if s.head == len(s.queue) {
		if cap(s.queue) > keepQueue {
			s.queue = nil
		} else {
			s.queue = s.queue[:0]
		}
		s.head = 0
		for k := range s.latest {
			m := s.latest[k]
			if m == nil {
				continue
			}
			if size > 0 && size+len(m) > max {
				return dst, true
			}
			size += len(m)
			dst = append(dst, m)
			s.latest[k] = nil
		}
		s.signaled = false
		return dst, false
	}
	return dst, true
}

// Queued reports how many messages and bytes wait in the queue, not counting the
// latest states.
func (s *Subscription[T]) Queued() (messages, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) - s.head, s.bytes
}

// Done is closed once the subscription ends: dropped as slow, closed by its owner, or
// closed with the hub. A dropped subscription's messages are let go at once.
func (s *Subscription[T]) Done() <-chan struct{} { return s.done }

// Err returns nil while the subscription is active, ErrSlow if it was dropped for
// falling behind, and ErrClosed if it was closed by its owner or by Hub.Close.
func (s *Subscription[T]) Err() error {
	select {
	case <-s.done:
		return s.err // the close of done orders this read after the write in finish
	default:
		return nil
	}
}

// Topic returns the topic subscribed to.
func (s *Subscription[T]) Topic() T { return s.topic }

// Close removes the subscription from the hub, lets go of what waits and closes Done.
// It is idempotent and safe to call after a drop or Hub.Close.
func (s *Subscription[T]) Close() {
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

// finish records why the subscription ended, lets go of its messages and closes
// Done, the first time only.
func (s *Subscription[T]) finish(err error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.release()
		s.mu.Unlock()
		s.err = err
		close(s.done)
	})
}
