package live

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// Ticks for large audiences (SPEC §4): --tick-interval is the fastest rate; an
// instance with a large audience sends each viewer fewer ticks, but at least one
// every tickAtLeast.
const (
	// fanoutBudget is how many frames a second one instance spends on ticks, and as
	// many on one window's change-driven snapshots and on its viewer counts, before
	// it sends them less often. A frame costs about 10 µs of CPU on a 2-core VM
	// (BENCHMARKS.md), so this is a fifth of a core; 2,000 viewers at 100 ms ticks
	// and windows with up to 1,000 viewers are not affected. Decisions, resets and
	// races are never thinned.
	fanoutBudget = 20_000
	tickAtLeast  = time.Second
)

// clock is the limiter's clock as the last tick read it, and Redis's state.
type clock struct {
	up     atomic.Bool
	status atomic.Pointer[[]byte] // the current status message
	last   atomic.Pointer[reading]
}

type reading struct {
	redisMs int64
	at      time.Time
}

func (c *clock) init() {
	c.up.Store(true) // until a tick says otherwise
	c.status.Store(new(statusMessage(true)))
}

// nowMs estimates Redis's clock from the last tick: for events such as resets that
// carry a time but need no Redis round trip of their own.
func (v *View) nowMs() int64 {
	r := v.clock.last.Load()
	if r == nil {
		return time.Now().UnixMilli()
	}
	return r.redisMs + time.Since(r.at).Milliseconds()
}

// setStatus records Redis's state and tells every viewer; it reports whether the
// state changed. A repeated "down" is sent too: while it lasts viewers hear no
// ticks, and the page takes a silent socket for a dead one.
func (v *View) setStatus(up bool) bool {
	msg := statusMessage(up)
	v.clock.status.Store(&msg)
	changed := v.clock.up.Swap(up) != up
	if changed {
		state := "down"
		if up {
			state = "up"
		}
		// Readiness logs Redis outages for the whole server.
		v.d.Log.Debug("viewers' redis status changed", "redis", state)
	}
	if changed || !up {
		v.hub.BroadcastLatest(kindStatus, msg)
	}
	return changed
}

// tickShare is how many tick rounds apart each of n viewers gets a tick: every
// round until n viewers' ticks would exceed fanoutBudget frames a second, and never
// so far apart that a viewer waits longer than tickAtLeast.
func tickShare(n int, interval time.Duration) uint64 {
	perSecond := float64(n) * float64(time.Second) / float64(interval)
	every := max(1, int(math.Ceil(perSecond/fanoutBudget)))
	return uint64(min(every, max(1, int(tickAtLeast/interval))))
}

// tickLoop reads Redis's clock once per tick for all viewers of this instance; a
// failed read is what marks Redis down for them.
func (v *View) tickLoop(ctx context.Context) {
	t := time.NewTicker(v.d.TickInterval)
	defer t.Stop()
	var round uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tctx, cancel := v.redisCtx(ctx)
		now, err := v.d.Redis.Time(tctx).Result()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			v.setStatus(false)
			continue
		}
		v.setStatus(true)
		ms := now.UnixMilli()
		v.clock.last.Store(&reading{redisMs: ms, at: time.Now()})
		if n := v.hub.Total(); n > 0 {
			// A large audience gets the clock in turns; the page interpolates.
			v.hub.BroadcastLatestShare(kindTick, TickMessage(ms), tickShare(n, v.d.TickInterval), round)
			round++
		}
	}
}
