package live

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ratescope/ratescope/limiter"
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

// take reserves est for a read about to be made, if any credit is left:
// reads made at once (viewers joining together) each see what the others
// reserved. spend settles the difference once the read's cost is known.
func (b *readBudget) take(now time.Time, est int) bool {
	if b.left(now) <= 0 {
		return false
	}
	b.spend(est)
	return true
}

// spend takes the cost of reads done (a negative one gives back what a
// reservation took beyond the cost).
func (b *readBudget) spend(entries int) {
	if b.rate <= 0 || entries == 0 {
		return
	}
	b.mu.Lock()
	b.credit -= float64(entries)
	b.mu.Unlock()
}

// cost is what a read that returned n entries cost.
func cost(n int) int { return readCost + n }

// afford splits ds into what the budget lets this round read, most urgent
// first, and what must wait, estimating each read by the window's last one
// (a full window when none is known: a guess too low would let a crowd of
// unread windows spend seconds of budget in one round). When a periodic
// snapshot waits, the clock's ticks stop riding on them.
func (v *View) afford(now time.Time, ds []snapshotDue, size map[Window]readSize) (read, later []snapshotDue) {
	left := v.budget.left(now)
	if math.IsInf(left, 1) {
		return ds, nil
	}
	slices.SortStableFunc(ds, func(a, b snapshotDue) int {
		if a.urgency != b.urgency {
			return int(a.urgency - b.urgency)
		}
		return a.since.Compare(b.since)
	})
	spent := 0.0
	for i, d := range ds {
		if spent >= left {
			for _, d := range ds[i:] {
				if d.urgency != changed {
					v.thinnedAt.Store(now.UnixNano())
					break
				}
			}
			return ds[:i], ds[i:]
		}
		spent += float64(v.estimate(d.w, size))
	}
	return ds, nil
}

// estimate is what reading w will cost: as much as its last read; a full
// window's when it was never read; nothing for a lab or an overview, which
// have no window to read.
func (v *View) estimate(w Window, size map[Window]readSize) int {
	if _, ok := v.d.Policy(w.Policy); !ok {
		return 0
	}
	if n, ok := size[w]; ok && n.bytes >= 0 {
		return cost(n.entries)
	}
	return cost(limiter.MaxSnapshot)
}

// thinned reports whether periodic snapshots were put off lately: then they
// cannot carry the clock.
func (v *View) thinned() bool {
	at := v.thinnedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < thinnedFor
}
