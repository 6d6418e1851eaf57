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
	return max(snapshotCoalesce, time.Duration(n)*time.Second/fanoutBudget)
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

// snapshotLoop sends each watched window's snapshot when it is due. Every
// window keeps a phase of its own within the second, so thousands of windows
// are read a few at a time all through the second, never all in one burst
// whose last window waits for all the others.
func (v *View) snapshotLoop(ctx context.Context) {
	t := time.NewTicker(snapshotCoalesce)
	defer t.Stop()
	sent := map[Window]time.Time{} // when each window's last snapshot was due
	var ready []Window             // the windows due this round
	var at []time.Time             // and when each was due
	var periodic []bool            // and whether it was its periodic snapshot
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		dirty := v.snapshots.takeDirty()
		watched := v.hub.Topics()
		ready, at, periodic = ready[:0], at[:0], periodic[:0]
		for _, w := range watched {
			last, seen := sent[w]
			if !seen { // its viewers got one on connect; the next comes within a second
				last = now.Add(-phase(w))
				sent[w] = last
			}
			_, changed := dirty[w]
			switch {
			case due(now, last, snapshotEvery):
				next := last.Add(snapshotEvery)
				for now.Sub(next) >= snapshotEvery { // missed rounds are skipped, the phase kept
					next = next.Add(snapshotEvery)
				}
				ready, at, periodic = append(ready, w), append(at, next), append(periodic, true)
			case changed && due(now, last, min(spacing(v.hub.Count(w)), snapshotEvery)):
				ready, at, periodic = append(ready, w), append(at, now), append(periodic, false)
			case changed:
				v.snapshots.markDirty(w) // not yet: keep it for a later round
			}
		}
		for i, ok := range v.publishSnapshots(ctx, ready, periodic) {
			if ok {
				sent[ready[i]] = at[i]
			} else if _, changed := dirty[ready[i]]; changed {
				v.snapshots.markDirty(ready[i]) // Redis failed: try again next round
			}
		}
		if len(sent) > len(watched) { // forget windows nobody watches any more
			keep := make(map[Window]time.Time, len(watched))
			for _, w := range watched {
				keep[w] = sent[w]
			}
			sent = keep
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

// publishSnapshots reads the windows ws, in batches, and publishes each
// one's snapshot to its viewers, a periodic one with the tick it carries
// (clock.ride); it reports which were read. Once a batch fails the rest are
// left for a later round: while Redis is down, a round costs a few timed-out
// reads, not one per window.
func (v *View) publishSnapshots(ctx context.Context, ws []Window, periodic []bool) []bool {
	done := make([]bool, len(ws))
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
					w := ws[lo+i]
					var states [2]hub.State
					n := 0
					if tick := v.clock.ride.Load(); tick != nil && periodic[lo+i] {
						states[n], n = hub.State{Kind: kindTick, Msg: *tick}, n+1
					}
					switch {
					case err == nil:
						states[n], n = hub.State{Kind: kindSnapshot, Msg: msgs[i]}, n+1
						v.hub.PublishStates(w, states[:n]...)
					case errors.Is(err, errUnknownPolicy): // a lab, or a policy a reload removed: the tick alone
						v.hub.PublishStates(w, states[:n]...)
					default:
						failed.Store(true)
						continue
					}
					done[lo+i] = true
				}
			}
		})
	}
	wg.Wait()
	if len(ws) > 0 {
		v.snapshotsFailing.Store(failed.Load())
	}
	return done
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
