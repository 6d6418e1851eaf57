package live

import (
	"context"
	"sync"
	"time"
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

// snapshotLoop sends each watched window's snapshot when it is due.
func (v *View) snapshotLoop(ctx context.Context) {
	t := time.NewTicker(snapshotCoalesce)
	defer t.Stop()
	sent := map[Window]time.Time{} // when each window's last snapshot went out
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		dirty := v.snapshots.takeDirty()
		watched := v.hub.Topics()
		for _, w := range watched {
			last, seen := sent[w]
			if !seen {
				last, sent[w] = now, now // its viewers got one on connect
			}
			_, changed := dirty[w]
			gap := min(spacing(v.hub.Count(w)), snapshotEvery)
			if !due(now, last, snapshotEvery) && !(changed && due(now, last, gap)) {
				if changed {
					v.snapshots.markDirty(w) // not yet: keep it for a later round
				}
				continue
			}
			sent[w] = now
			if msg, ok := v.snapshot(ctx, w); ok {
				v.hub.PublishLatest(w, kindSnapshot, msg)
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

// snapshot reads one window as a snapshot message.
func (v *View) snapshot(ctx context.Context, w Window) ([]byte, bool) {
	p, ok := v.d.Policy(w.Policy)
	if !ok {
		return nil, false
	}
	sctx, cancel := v.redisCtx(ctx)
	defer cancel()
	win, err := v.d.ReadWindow(sctx, w.Key, p)
	if err != nil {
		return nil, false
	}
	return snapshotMessage(win), true
}
