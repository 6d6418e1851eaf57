package live

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ratescope/ratescope/limiter"
)

// recentReads shares reads of a window, so a crowd arriving at one window
// costs a read or two, not one per viewer, and viewers' reads of a window
// start at least snapshotCoalesce apart. A viewer shares only a read that
// started after it subscribed: what happened before is in the read, what
// happens after comes in its stream, so no change falls between them.
type recentReads struct {
	mu sync.Mutex
	m  map[Window]*reads
}

// reads are a window's latest read and the one viewers that came later wait
// for.
type reads struct {
	cur  *read // the latest read started; nil once swept
	next *read // not started yet: waits for snapshotCoalesce after cur's start
}

// read is one read of a window, in flight until done is closed.
type read struct {
	done    chan struct{}
	start   time.Time // when it was sent
	at      time.Time // when it finished; zero while in flight
	msg     []byte
	err     error
	forLoop bool // the snapshot loop's own read
}

func newRecentReads() recentReads { return recentReads{m: map[Window]*reads{}} }

// join returns the read of w a viewer that subscribed at since shares: one
// started since, else the next one, and whether the caller leads it — then
// it waits wait, calls begin and reads, and must finish it.
func (rs *recentReads) join(w Window, since time.Time) (r *read, lead bool, wait time.Duration) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	e := rs.of(w)
	switch {
	case e.cur != nil && !e.cur.start.Before(since):
		return e.cur, false, 0
	case e.next != nil:
		return e.next, false, 0
	}
	r = &read{done: make(chan struct{})}
	e.next = r
	if e.cur != nil {
		wait = time.Until(e.cur.start.Add(snapshotCoalesce))
	}
	return r, true, max(wait, 0)
}

// of is w's reads, made on first use; rs.mu is held.
func (rs *recentReads) of(w Window) *reads {
	e := rs.m[w]
	if e == nil {
		e = &reads{}
		rs.m[w] = e
	}
	return e
}

// begin starts a read led by a viewer: it is w's latest from now on.
func (rs *recentReads) begin(w Window, r *read) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	e := rs.of(w)
	if e.next == r {
		e.next = nil
	}
	e.cur, r.start = r, time.Now()
}

// claim is the snapshot loop's: a viewer's read of w made within
// snapshotCoalesce that succeeded, to publish instead of reading again, or
// in flight, to wait a round for (false); else a new read it must finish
// (true). Its own reads it does not share: it reads a window at most once a
// round.
func (rs *recentReads) claim(w Window, now time.Time) (*read, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	e := rs.of(w)
	if r := e.cur; r != nil && !r.forLoop && now.Sub(r.start) < snapshotCoalesce && (r.at.IsZero() || r.err == nil) {
		return r, false
	}
	r := &read{done: make(chan struct{}), start: now, forLoop: true}
	e.cur = r
	return r, true
}

// finish records a read's outcome for those that share it.
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

// sweep forgets windows whose latest read finished snapshotCoalesce ago and
// that nobody waits on: what is kept is about one round's reads.
func (rs *recentReads) sweep(now time.Time) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for w, e := range rs.m {
		if e.next == nil && (e.cur == nil || (!e.cur.at.IsZero() && now.Sub(e.cur.at) >= snapshotCoalesce)) {
			delete(rs.m, w)
		}
	}
}

// errOverBudget is a viewer's first read not made: the budget was spent.
var errOverBudget = errors.New("snapshot budget spent")

// firstRead is what a viewer that subscribed to w at since is sent first
// (a window's snapshot, a lab's recent requests): read by readFirst, or
// shared with other viewers' (recentReads.join). While the budget is spent
// nothing is read: the viewer gets nothing now, and the snapshot loop sends
// w's viewers a snapshot before any other when the budget allows
// (snapshots.markFresh).
func (v *View) firstRead(w Window, since time.Time, readFirst func(ctx context.Context) ([]byte, int, error)) ([]byte, bool) {
	r, lead, wait := v.reads.join(w, since)
	if !lead {
		select {
		case <-r.done:
		case <-time.After(snapshotTimeout):
			return nil, false
		}
		msg, err := v.reads.result(r)
		return msg, err == nil
	}
	if wait > 0 {
		time.Sleep(wait)
	}
	v.reads.begin(w, r)
	// What the read will cost is not known until it is made: a full
	// window's is reserved, the rest given back after.
	est := cost(limiter.MaxSnapshot)
	if !v.budget.take(time.Now(), est) {
		v.reads.finish(r, nil, errOverBudget)
		v.snapshots.markFresh(w)
		return nil, false
	}
	ctx, cancel := v.redisCtx(v.ctx)
	defer cancel()
	msg, n, err := readFirst(ctx)
	if err == nil {
		v.budget.spend(cost(n) - est)
		v.snapshots.markSized(w, readSize{len(msg), n})
	} else {
		v.budget.spend(-est) // a failed read costs Redis little
	}
	v.reads.finish(r, msg, err)
	return msg, err == nil
}
