package live

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// Snapshot reads within a budget (SPEC §4, §10 "Viewers"): a snapshot of a
// full window makes Redis return 1,000 entries, and anyone may watch any
// window of an open policy, so the Redis work of snapshots must not follow
// the number of watched windows. An instance's snapshots read at most its
// budget of entries a second; when the windows watched want more, every
// window's snapshots come further apart — the most overdue first, so all of
// them at the same pace — and decisions still carry each change as it
// happens.
const (
	// DefaultSnapshotBudget is how many entries a second an instance's
	// snapshots read from Redis by default: 200 full windows, or 20,000
	// empty ones, a second. Redis spends ~0.5 µs an entry returned
	// (BENCHMARKS.md), so about a tenth of one core.
	DefaultSnapshotBudget = 200_000
	// readCost is what a read costs beyond its entries, in entries: a script
	// call on an empty window costs Redis about as much as ten entries.
	readCost = 10
	// budgetSaved is how much unspent budget an idle instance keeps, in
	// time: a quarter of a second's worth, so a round after a quiet spell
	// never reads a whole second's worth at once.
	budgetSaved = 250 * time.Millisecond
	// thinnedFor is how long after a periodic snapshot was put off the
	// clock's ticks stop riding on snapshots (clock.ride): they go alone
	// and keep their at-least-once-a-second promise.
	thinnedFor = 2 * time.Second
)

// readBudget is a token bucket of entries read: reads spend what they cost
// once they know it, so the credit may run negative, and then nothing more
// is read until it is repaid. Over any few seconds, reads cost at most the
// rate (plus what budgetSaved keeps).
type readBudget struct {
	rate float64 // entries a second; 0: no budget

	mu     sync.Mutex
	credit float64
	at     time.Time
}

func newReadBudget(rate int) *readBudget {
	return &readBudget{rate: float64(rate), credit: float64(rate) * budgetSaved.Seconds()}
}

// left is the credit at now: +Inf with no budget.
func (b *readBudget) left(now time.Time) float64 {
	if b.rate <= 0 {
		return math.Inf(1)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.at.IsZero() && now.After(b.at) {
		b.credit = min(b.credit+now.Sub(b.at).Seconds()*b.rate, b.rate*budgetSaved.Seconds())
	}
	if now.After(b.at) {
		b.at = now
	}
	return b.credit
}

// spend takes the cost of reads done.
func (b *readBudget) spend(entries int) {
	if b.rate <= 0 || entries == 0 {
		return
	}
	b.mu.Lock()
	b.credit -= float64(entries)
	b.mu.Unlock()
}

// errOverBudget is a viewer's first read not made: the budget was spent.
var errOverBudget = errors.New("snapshot budget spent")

// cost is what a read that returned n entries cost.
func cost(n int) int { return readCost + n }

// recentReads shares a window's read among everything that wants it within
// snapshotCoalesce, so a crowd arriving at one window costs one read, not
// one per viewer, and a window is read at most once per snapshotCoalesce
// whoever asks: the snapshot loop, or viewers joining.
type recentReads struct {
	mu sync.Mutex
	m  map[Window]*read
}

// read is one read of a window, in flight until done is closed.
type read struct {
	done    chan struct{}
	msg     []byte
	err     error
	at      time.Time // when it finished
	forLoop bool      // the snapshot loop's own read
}

func newRecentReads() recentReads { return recentReads{m: map[Window]*read{}} }

// claim returns w's read in flight or finished within snapshotCoalesce, and
// false; or a new read that the caller must finish, and true. The loop
// shares only a viewer's read that succeeded: it reads a window at most once
// a round anyway, and a failed read is for it to try again.
func (rs *recentReads) claim(w Window, now time.Time, forLoop bool) (*read, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r, ok := rs.m[w]; ok {
		inFlight := r.at.IsZero()
		recent := !inFlight && now.Sub(r.at) < snapshotCoalesce
		if inFlight || (recent && !(forLoop && (r.forLoop || r.err != nil))) {
			return r, false
		}
	}
	r := &read{done: make(chan struct{}), forLoop: forLoop}
	rs.m[w] = r
	return r, true
}

// finish records a claimed read's outcome for those that wait or come soon.
func (rs *recentReads) finish(r *read, msg []byte, err error) {
	rs.mu.Lock()
	r.msg, r.err, r.at = msg, err, time.Now()
	rs.mu.Unlock()
	close(r.done)
}

// result is a finished read's outcome.
func (rs *recentReads) result(r *read) ([]byte, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return r.msg, r.err
}

// sweep forgets reads finished more than snapshotCoalesce ago: what is kept
// is at most one round's reads.
func (rs *recentReads) sweep(now time.Time) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for w, r := range rs.m {
		if !r.at.IsZero() && now.Sub(r.at) >= snapshotCoalesce {
			delete(rs.m, w)
		}
	}
}

// firstRead is what a viewer that joins w is sent first (a window's
// snapshot, a lab's recent requests), read by readFirst — or shared with a
// read of w that another viewer or the snapshot loop made within
// snapshotCoalesce. While the budget is spent nothing is read: the viewer
// gets nothing now, and the snapshot loop sends w's viewers a snapshot
// before any other when the budget allows (snapshots.markFresh).
func (v *View) firstRead(w Window, readFirst func(ctx context.Context) ([]byte, int, error)) ([]byte, bool) {
	now := time.Now()
	r, mine := v.reads.claim(w, now, false)
	if !mine {
		select {
		case <-r.done:
		case <-time.After(snapshotTimeout):
			return nil, false
		}
		msg, err := v.reads.result(r)
		return msg, err == nil
	}
	if v.budget.left(now) <= 0 {
		v.reads.finish(r, nil, errOverBudget)
		v.snapshots.markFresh(w)
		return nil, false
	}
	ctx, cancel := v.redisCtx(v.ctx)
	defer cancel()
	msg, n, err := readFirst(ctx)
	if err == nil {
		v.budget.spend(cost(n))
	}
	v.reads.finish(r, msg, err)
	return msg, err == nil
}
