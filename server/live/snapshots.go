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

// snapshots remembers which windows changed since their last snapshot.
type snapshots struct {
	mu    sync.Mutex
	dirty map[Window]struct{}
}

func newSnapshots() snapshots { return snapshots{dirty: map[Window]struct{}{}} }

func (s *snapshots) markDirty(w Window) {
	s.mu.Lock()
	s.dirty[w] = struct{}{}
	s.mu.Unlock()
}

// takeDirty returns the windows changed since the last call.
func (s *snapshots) takeDirty() map[Window]struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.dirty
	s.dirty = map[Window]struct{}{}
	return d
}

// spacing is how far apart messages to n viewers of one window must be for the
// instance to spend at most fanoutBudget frames a second on them: snapshotCoalesce
// up to 1,000 viewers, 500 ms for 10,000.
func spacing(n int) time.Duration {
	return snapshotSpacing(n, 0)
}

// writeUnit is what one write to a socket carries: a frame larger than the
// connection's 4 KB write buffer costs a write per 4 KB.
const writeUnit = 4 << 10

// snapshotSpacing is spacing for snapshots of size bytes: a large snapshot counts
// as a frame per writeUnit it fills, so a window with many entries and a large
// audience gets its change-driven snapshots less often. Its viewers lose nothing:
// each decision says what changed as it happens, and every viewer still gets a
// snapshot every second.
func snapshotSpacing(n, size int) time.Duration {
	frames := time.Duration(n) * time.Duration(1+size/writeUnit)
	return max(snapshotCoalesce, frames*time.Second/fanoutBudget)
}

// due reports whether something last sent at last may go again at now, gap apart;
// half a loop period of slack absorbs the ticker's jitter.
func due(now, last time.Time, gap time.Duration) bool {
	return now.Sub(last) >= gap-snapshotCoalesce/2
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

// A window with a large audience takes its snapshots in turns, once a second
// each: its viewers fall in groups of about groupViewers, and each 50 ms round
// serves one group, so no round writes a snapshot to every viewer at once and
// a decision that arrives meanwhile waits behind a few hundred writes, not
// thousands. Changes reach these viewers in their decisions as they happen;
// the snapshot that follows is the next one their group is sent. A window of
// up to groupViewers viewers (one group) gets its change-driven snapshots.
const (
	groupViewers = 250
	maxGroups    = int(snapshotEvery / snapshotCoalesce)
)

// groups is how many groups n viewers of one window form: 1 up to groupViewers.
func groups(n int) int {
	return min(maxGroups, max(1, (n+groupViewers-1)/groupViewers))
}

// turns is a large window's snapshot state: which group is next and when each
// group's last snapshot went out.
type turns struct {
	of   int // the number of groups these turns are for
	next int
	last [maxGroups]time.Time
}

// regroup returns turns for g groups that continue old (nil when the window
// was small, sent being its last snapshot, zero if it had none): each new
// group counts from the oldest snapshot any viewer may have had, so regrouping
// while a crowd arrives never leaves a viewer more than a second without one.
func regroup(old *turns, g int, now, sent time.Time) *turns {
	oldest := now
	if old != nil {
		for _, at := range old.last[:old.of] {
			oldest = minTime(oldest, at)
		}
	} else if !sent.IsZero() {
		oldest = minTime(oldest, sent)
	}
	tw := &turns{of: g}
	for i := range g {
		tw.last[i] = oldest
	}
	return tw
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// snapshotDue is one snapshot to publish: to a window's viewers, or to one
// group of them (group of groups; groups 1 is everyone).
type snapshotDue struct {
	w             Window
	group, groups int
	periodic      bool
	at            time.Time // when it was due
}

// snapshotLoop sends each watched window's snapshot when it is due. Every
// window keeps a phase of its own within the second, so thousands of windows
// are read a few at a time all through the second, never all in one burst
// whose last window waits for all the others.
func (v *View) snapshotLoop(ctx context.Context) {
	t := time.NewTicker(snapshotCoalesce)
	defer t.Stop()
	sent := map[Window]time.Time{} // when each window's last snapshot was due
	size := map[Window]int{}       // and how large it was
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
		dirty := v.snapshots.takeDirty()
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
					ready = append(ready, snapshotDue{w: w, group: i, groups: g, periodic: true, at: now})
				}
				continue
			}
			delete(large, w)
			_, changed := dirty[w]
			last, seen := sent[w]
			if !seen { // its viewers got one on connect; the next comes within a second
				last = now.Add(-phase(w))
				sent[w] = last
			}
			switch {
			case due(now, last, snapshotEvery):
				next := last.Add(snapshotEvery)
				for now.Sub(next) >= snapshotEvery { // missed rounds are skipped, the phase kept
					next = next.Add(snapshotEvery)
				}
				ready = append(ready, snapshotDue{w: w, groups: 1, periodic: true, at: next})
			case changed && due(now, last, min(snapshotSpacing(n, size[w]), snapshotEvery)):
				ready = append(ready, snapshotDue{w: w, groups: 1, at: now})
			case changed:
				v.snapshots.markDirty(w) // not yet: keep it for a later round
			}
		}
		for i, n := range v.publishSnapshots(ctx, ready) {
			d := ready[i]
			switch {
			case n >= 0 && d.groups > 1:
				large[d.w].last[d.group] = d.at
			case n >= 0:
				sent[d.w], size[d.w] = d.at, n
			case d.groups == 1:
				if _, changed := dirty[d.w]; changed {
					v.snapshots.markDirty(d.w) // Redis failed: try again next round
				}
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

// phase is where in each second w's periodic snapshots fall: spread by a
// hash of the window, so windows that appeared together are not read together.
func phase(w Window) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(w.Policy))
	_, _ = h.Write([]byte{'|'})
	_, _ = h.Write([]byte(w.Key))
	return time.Duration(h.Sum32()) % snapshotEvery
}

// publishSnapshots reads the windows of ds, in batches, and publishes each one's snapshot to its viewers
// (or the group due), a periodic one with the tick it carries (clock.ride); it
// reports each one's size, or -1 for those it could not read. Once a batch
// fails the rest are left for a later round: while Redis is down, a round
// costs a few timed-out reads, not one per window.
func (v *View) publishSnapshots(ctx context.Context, ds []snapshotDue) []int {
	sizes := make([]int, len(ds))
	for i := range sizes {
		sizes[i] = -1 // until read
	}
	ws := make([]Window, len(ds))
	for i, d := range ds {
		ws[i] = d.w
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
				msgs, errs := v.readSnapshots(bctx, ws[lo:hi])
				cancel()
				for i, err := range errs {
					d := ds[lo+i]
					var states [2]hub.State
					n := 0
					if tick := v.clock.ride.Load(); tick != nil && d.periodic {
						states[n], n = hub.State{Kind: kindTick, Msg: *tick}, n+1
					}
					switch {
					case err == nil:
						states[n], n = hub.State{Kind: kindSnapshot, Msg: msgs[i]}, n+1
					case errors.Is(err, errUnknownPolicy): // a lab, or a policy a reload removed: the tick alone
					default:
						failed.Store(true)
						continue
					}
					v.hub.PublishStatesShare(d.w, uint64(d.groups), uint64(d.group), states[:n]...)
					sizes[lo+i] = len(msgs[i])
				}
			}
		})
	}
	wg.Wait()
	if len(ws) > 0 {
		v.snapshotsFailing.Store(failed.Load())
	}
	return sizes
}

// errUnknownPolicy is a snapshot's error for a window whose policy no longer
// exists.
var errUnknownPolicy = errors.New("unknown policy")

// snapshot reads one window as a snapshot message, within the check timeout.
func (v *View) snapshot(ctx context.Context, w Window) ([]byte, error) {
	ctx, cancel := v.redisCtx(ctx)
	defer cancel()
	msgs, errs := v.readSnapshots(ctx, []Window{w})
	return msgs[0], errs[0]
}

// readSnapshots reads windows as snapshot messages, in one round trip.
func (v *View) readSnapshots(ctx context.Context, ws []Window) ([][]byte, []error) {
	msgs, errs := make([][]byte, len(ws)), make([]error, len(ws))
	reads := make([]limiter.WindowOf, 0, len(ws))
	at := make([]int, 0, len(ws))
	for i, w := range ws {
		p, ok := v.d.Policy(w.Policy)
		if !ok {
			errs[i] = errUnknownPolicy
			continue
		}
		reads, at = append(reads, limiter.WindowOf{Key: w.Key, Policy: p}), append(at, i)
	}
	if len(reads) == 0 {
		return msgs, errs
	}
	wins, werrs := v.d.ReadWindows(ctx, reads)
	for j, i := range at {
		if errs[i] = werrs[j]; errs[i] == nil {
			msgs[i] = snapshotMessage(wins[j])
		}
	}
	return msgs, errs
}
