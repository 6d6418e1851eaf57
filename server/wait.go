package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratescope/ratescope/limiter"
)

// defaultMaxWaiters is how many checks one instance holds for their slots
// at most (--max-waiters).
const defaultMaxWaiters = 10_000

// errStopping is why a held check was let go before its slot: the server
// is shutting down.
var errStopping = errors.New("the server is shutting down")

// waiters are the checks this instance holds until their booked slots
// (POST /api/v1/check with wait). Each costs its goroutine and connection,
// asleep on a timer: the cap bounds them, and a check that finds no free
// place is decided as if it could not wait — allowed when its cost fits
// now, else denied at once with nothing booked. On shutdown every held
// check is let go: its booking refunded, its answer 503.
type waiters struct {
	max int // 0: none is held

	mu       sync.Mutex
	n        int
	stopping chan struct{}
	stopped  bool

	held      prometheus.Gauge
	served    prometheus.Counter
	abandoned prometheus.Counter
	refused   prometheus.Counter
}

func newWaiters(max int, m *metrics) *waiters {
	return &waiters{
		max: max, stopping: make(chan struct{}),
		held: m.waitersHeld, served: m.waitsServed, abandoned: m.waitsAbandoned, refused: m.waitsRefused,
	}
}

// take reserves a place for a check that may be held, before it is sent
// (so nothing is booked that could not be held); false when every place is
// taken or the server is stopping.
func (w *waiters) take() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.n >= w.max {
		return false
	}
	w.n++
	w.held.Inc()
	return true
}

// give frees a place taken: the check booked nothing, or its hold ended.
func (w *waiters) give() {
	w.mu.Lock()
	w.n--
	w.mu.Unlock()
	w.held.Dec()
}

// stop lets every held check go (hold returns errStopping) and takes no
// more; the server is shutting down.
func (w *waiters) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.stopping)
	}
}

// hold sleeps until the slot d booked — its wait from now, called as soon
// as the check answered, so never before Redis's clock reaches the slot —
// and reports how long it held; or ctx's error when the client went away
// first, or errStopping. It needs nothing of Redis: a booking is recorded
// already, so Redis failing meanwhile changes nothing for it.
func (w *waiters) hold(ctx context.Context, d limiter.Decision) (time.Duration, error) {
	start := time.Now()
	t := time.NewTimer(time.Duration(d.WaitMs()) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return time.Since(start), nil
	case <-ctx.Done():
		return time.Since(start), ctx.Err()
	case <-w.stopping:
		return time.Since(start), errStopping
	}
}
