package live

import "time"

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
