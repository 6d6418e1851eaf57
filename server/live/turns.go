package live

import "time"

// How often one window's viewers get its messages: spaced by the audience
// and the snapshot's size, and, for a large audience, in turns.
//
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
