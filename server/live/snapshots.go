package live

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live/hub"
)

// Snapshots (SPEC §4): on connect, after every change to the window (coalesced, at
// most one per snapshotCoalesce, spaced further for large audiences), and every
// snapshotEvery. A snapshot is a state: a newer one replaces one not yet sent.
const (
	snapshotCoalesce = 50 * time.Millisecond
	snapshotEvery    = time.Second
)

// snapshots remembers which windows changed since their last snapshot,
// which have a viewer that joined without one (the budget was spent), and
// how large the windows viewers read as they joined were.
type snapshots struct {
	mu    sync.Mutex
	dirty map[Window]struct{}
	fresh map[Window]struct{}
	sized map[Window]readSize
}

func newSnapshots() snapshots {
	return snapshots{dirty: map[Window]struct{}{}, fresh: map[Window]struct{}{}, sized: map[Window]readSize{}}
}

// markSized records the size of a read made for a viewer that joined, so
// the loop knows what reading w costs before it reads it.
func (s *snapshots) markSized(w Window, n readSize) {
	s.mu.Lock()
	s.sized[w] = n
	s.mu.Unlock()
}

func (s *snapshots) markDirty(w Window) {
	s.mu.Lock()
	s.dirty[w] = struct{}{}
	s.mu.Unlock()
}

func (s *snapshots) markFresh(w Window) {
	s.mu.Lock()
	s.fresh[w] = struct{}{}
	s.mu.Unlock()
}

// take returns the windows changed, those joined without a snapshot, and
// those read for viewers that joined, since the last call.
func (s *snapshots) take() (dirty, fresh map[Window]struct{}, sized map[Window]readSize) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dirty, fresh, sized = s.dirty, s.fresh, s.sized
	s.dirty, s.fresh = map[Window]struct{}{}, map[Window]struct{}{}
	if len(sized) > 0 {
		s.sized = map[Window]readSize{}
	}
	return dirty, fresh, sized
}

// Snapshot reads: snapshotBatch windows share one Redis round trip, and up
// to snapshotReaders batches are in flight, so thousands of watched windows
// are read within a fraction of a second while most of the Redis client's
// connections stay free for checks and the clock. A batch may take
// snapshotTimeout: it reads many windows, and a late one is only late.
const (
	snapshotBatch   = 64
	snapshotReaders = 4
	snapshotTimeout = time.Second
)

// snapshotDue is one snapshot to publish: to a window's viewers, or to one
// group of them (group of groups; groups 1 is everyone).
type snapshotDue struct {
	w             Window
	group, groups int
	periodic      bool
	at            time.Time // when it was due
	// urgency orders what the budget affords: a viewer without a snapshot
	// first, then periodic snapshots, then change-driven ones; within each,
	// the one waiting longest (since) first.
	urgency urgency
	since   time.Time
}

type urgency int

const (
	joined urgency = iota
	periodic
	changed
)

// readSize is what one read brought: the message's bytes (-1: not read)
// and the window's entries.
type readSize struct{ bytes, entries int }

// snapshotLoop sends each watched window's snapshot when it is due. Every
// window keeps a phase of its own within the second, so thousands of windows
// are read a few at a time all through the second, never all in one burst
// whose last window waits for all the others. A round reads what the budget
// affords (afford); the rest stays due for the next round.
func (v *View) snapshotLoop(ctx context.Context) {
	t := time.NewTicker(snapshotCoalesce)
	defer t.Stop()
	sent := map[Window]time.Time{} // when each window's last snapshot was due
	size := map[Window]readSize{}  // and how large it was
	large := map[Window]*turns{}   // the windows whose viewers take turns
	var ready []snapshotDue
	var watched []hub.Audience[Window]
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		v.reads.sweep(now)
		dirty, fresh, sized := v.snapshots.take()
		for w, n := range sized {
			size[w] = n
		}
		watched = v.hub.Audiences(watched[:0])
		ready = ready[:0]
		for _, a := range watched {
			w, n := a.Topic, a.Count
			if g := groups(n); g > 1 {
				tw := large[w]
				if tw == nil || tw.of != g { // the audience grew or shrank: regroup
					tw = regroup(tw, g, now, sent[w])
					large[w] = tw
					delete(sent, w)
				}
				i := tw.next
				tw.next = (i + 1) % g
				// Sent when waiting for the group's next turn would leave its
				// viewers more than a second without a snapshot.
				if now.Add(time.Duration(g)*snapshotCoalesce).Sub(tw.last[i]) > snapshotEvery+snapshotCoalesce/2 {
					ready = append(ready, snapshotDue{w: w, group: i, groups: g, periodic: true, at: now, urgency: periodic, since: tw.last[i]})
				}
				continue
			}
			delete(large, w)
			_, isDirty := dirty[w]
			_, isFresh := fresh[w]
			last, seen := sent[w]
			if !seen { // its viewers got one on connect; the next comes within a second
				last = now.Add(-phase(w))
				sent[w] = last
			}
			switch {
			case isFresh:
				ready = append(ready, snapshotDue{w: w, groups: 1, at: now, urgency: joined})
			case due(now, last, snapshotEvery):
				next := last.Add(snapshotEvery)
				for now.Sub(next) >= snapshotEvery { // missed rounds are skipped, the phase kept
					next = next.Add(snapshotEvery)
				}
				ready = append(ready, snapshotDue{w: w, groups: 1, periodic: true, at: next, urgency: periodic, since: last})
			case isDirty && due(now, last, min(snapshotSpacing(n, size[w].bytes), snapshotEvery)):
				ready = append(ready, snapshotDue{w: w, groups: 1, at: now, urgency: changed, since: last})
			case isDirty:
				v.snapshots.markDirty(w) // not yet: keep it for a later round
			}
		}
		var later []snapshotDue
		ready, later = v.afford(now, ready, size)
		for _, d := range later { // put off: still due next round
			v.remember(d, dirty)
		}
		for i, n := range v.publishSnapshots(ctx, ready) {
			d := ready[i]
			switch {
			case n.bytes >= 0 && d.groups > 1:
				large[d.w].last[d.group] = d.at
			case n.bytes >= 0:
				sent[d.w], size[d.w] = d.at, n
			default: // Redis failed: try again next round
				v.remember(d, dirty)
			} // a group whose read failed is overdue at its next turn
		}
		if len(sent)+len(large) > len(watched) { // forget windows nobody watches any more
			keep := make(map[Window]time.Time, len(watched))
			keepLarge := map[Window]*turns{}
			for _, a := range watched {
				w := a.Topic
				if tw, ok := large[w]; ok {
					keepLarge[w] = tw
				} else if at, ok := sent[w]; ok {
					keep[w] = at
				}
			}
			sent, large = keep, keepLarge
			for w := range size {
				if _, ok := keep[w]; !ok {
					delete(size, w)
				}
			}
		}
	}
}

// remember keeps a snapshot not sent this round for a later one: a change
// stays dirty, a joined viewer stays without one. A periodic snapshot needs
// nothing: it stays due until sent.
func (v *View) remember(d snapshotDue, dirty map[Window]struct{}) {
	switch {
	case d.urgency == joined:
		v.snapshots.markFresh(d.w)
	case d.groups == 1:
		if _, ok := dirty[d.w]; ok {
			v.snapshots.markDirty(d.w)
		}
	}
}

// phase is where in each second w's periodic snapshots fall: spread by a
// hash of the window, so windows that appeared together are not read together.
func phase(w Window) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(w.Policy))
	_, _ = h.Write([]byte{'|'})
	_, _ = h.Write([]byte(w.Key))
	return time.Duration(h.Sum32()) % snapshotEvery
}

// publishSnapshots reads the windows of ds, in batches, and publishes each
// one's snapshot to its viewers (or the group due), a periodic one with the
// tick it carries (clock.ride); it reports each one's size, bytes -1 for
// those it could not read. A window a viewer read within snapshotCoalesce
// is not read again: its read is published (recentReads.claim). Once a
// batch fails the rest are left for a later round: while Redis is down, a
// round costs a few timed-out reads, not one per window. What the reads
// cost is spent from the budget.
func (v *View) publishSnapshots(ctx context.Context, ds []snapshotDue) []readSize {
	sizes := make([]readSize, len(ds))
	now := time.Now()
	var todo []int // the ds to read
	claims := make([]*read, len(ds))
	for i, d := range ds {
		sizes[i].bytes = -1                       // until read
		if _, ok := v.d.Policy(d.w.Policy); !ok { // a lab or an overview: the tick alone
			todo = append(todo, i)
			continue
		}
		r, mine := v.reads.claim(d.w, now)
		if mine {
			claims[i] = r
			todo = append(todo, i)
			continue
		}
		select {
		case <-r.done:
		default:
			continue // a viewer's read is in flight: this one waits a round
		}
		if msg, err := v.reads.result(r); err == nil {
			v.publishSnapshot(d, msg)
			sizes[i].bytes = len(msg)
		}
	}
	ws := make([]Window, len(todo))
	for j, i := range todo {
		ws[j] = ds[i].w
	}
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	batches := (len(ws) + snapshotBatch - 1) / snapshotBatch
	for range min(batches, snapshotReaders) {
		wg.Go(func() {
			for b := int(next.Add(1)) - 1; b < batches && !failed.Load(); b = int(next.Add(1)) - 1 {
				lo := b * snapshotBatch
				hi := min(lo+snapshotBatch, len(ws))
				bctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
				msgs, entries, errs := v.readSnapshots(bctx, ws[lo:hi])
				cancel()
				spent := 0
				for j, err := range errs {
					i := todo[lo+j]
					if claims[i] != nil {
						v.reads.finish(claims[i], msgs[j], err)
						claims[i] = nil
					}
					switch {
					case err == nil:
						spent += cost(entries[j])
						sizes[i] = readSize{len(msgs[j]), entries[j]}
					case errors.Is(err, errUnknownPolicy): // a lab, or a policy a reload removed
						sizes[i].bytes = 0
					default:
						failed.Store(true)
						continue
					}
					v.publishSnapshot(ds[i], msgs[j])
				}
				v.budget.spend(spent)
			}
		})
	}
	wg.Wait()
	for _, r := range claims { // batches left unread once one failed
		if r != nil {
			v.reads.finish(r, nil, errUnread)
		}
	}
	if len(ws) > 0 {
		v.snapshotsFailing.Store(failed.Load())
	}
	return sizes
}

// errUnread is a read the loop claimed but left once Redis failed.
var errUnread = errors.New("not read: Redis failed")

// publishSnapshot sends d's viewers snap (nil: none, a lab's), a periodic
// one with the tick it carries.
func (v *View) publishSnapshot(d snapshotDue, snap []byte) {
	var states [2]hub.State
	n := 0
	if tick := v.clock.ride.Load(); tick != nil && d.periodic {
		states[n], n = hub.State{Kind: kindTick, Msg: *tick}, n+1
	}
	if snap != nil {
		states[n], n = hub.State{Kind: kindSnapshot, Msg: snap}, n+1
	}
	if n > 0 {
		v.hub.PublishStatesShare(d.w, uint64(d.groups), uint64(d.group), states[:n]...)
	}
}

// errUnknownPolicy is a snapshot's error for a window whose policy no longer
// exists.
var errUnknownPolicy = errors.New("unknown policy")

// snapshot is the first snapshot of a viewer that subscribed to w at since:
// read within the check timeout, or shared with other viewers'; false when
// none is sent now (firstRead).
func (v *View) snapshot(w Window, since time.Time) ([]byte, bool) {
	return v.firstRead(w, since, func(ctx context.Context) ([]byte, int, error) {
		msgs, entries, errs := v.readSnapshots(ctx, []Window{w})
		return msgs[0], entries[0], errs[0]
	})
}

// readSnapshots reads windows as snapshot messages, in one round trip, with
// the entries each returned. Each is read under the rules in force for its
// key: an override's when one applies.
func (v *View) readSnapshots(ctx context.Context, ws []Window) ([][]byte, []int, []error) {
	msgs, entries, errs := make([][]byte, len(ws)), make([]int, len(ws)), make([]error, len(ws))
	reads := make([]limiter.WindowOf, 0, len(ws))
	at := make([]int, 0, len(ws))
	overrides := make([]string, 0, len(ws))
	for i, w := range ws {
		p, ok := v.d.Policy(w.Policy)
		if !ok {
			errs[i] = errUnknownPolicy
			continue
		}
		p, o := v.inForce(w.Key, p)
		reads, at = append(reads, limiter.WindowOf{Key: w.Key, Policy: p}), append(at, i)
		overrides = append(overrides, o.label())
	}
	if len(reads) == 0 {
		return msgs, entries, errs
	}
	wins, werrs := v.d.ReadWindows(ctx, reads)
	for j, i := range at {
		if errs[i] = werrs[j]; errs[i] == nil {
			msgs[i], entries[i] = snapshotMessage(wins[j], overrides[j]), len(wins[j].Entries)
		}
	}
	return msgs, entries, errs
}
