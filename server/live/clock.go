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
	// fanoutBudget is how many frames a second one instance spends on one window's
	// change-driven snapshots and on its viewer counts before it sends them less
	// often. A frame costs about 10 µs of CPU on a 2-core VM (BENCHMARKS.md), so
	// this is a fifth of a core; windows with up to 1,000 viewers are not
	// affected. Decisions, resets and races are never thinned.
	fanoutBudget = 20_000
	// tickBudget is the frames a second one instance spends on ticks. Ticks are
	// the state most cheaply thinned (the page interpolates between them), and
	// every viewer also gets a snapshot a second: 500 viewers at 100 ms ticks get
	// every tick, and from 5,000 on each viewer gets one a second.
	tickBudget  = 5_000
	tickAtLeast = time.Second
)

// Redis is reported down to viewers only after downAfter clock reads in a row
// have failed, each given probeTimeout: a busy process (thousands of viewers)
// or a busy Redis may answer one read late, and a healthy Redis must never be
// reported down.
const (
	probeTimeout = time.Second
	downAfter    = 2
)

// clock is the limiter's clock as the last tick read it, and Redis's state.
type clock struct {
	up     atomic.Bool
	status atomic.Pointer[[]byte] // the current status message
	last   atomic.Pointer[reading]
	// ride is the latest tick while the audience is so large that each viewer
	// gets one tick a second: the periodic snapshots carry it, in the same
	// frame, instead of a frame of its own. Nil otherwise.
	ride atomic.Pointer[[]byte]
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
// round until n viewers' ticks would exceed tickBudget frames a second, and never
// so far apart that a viewer waits longer than tickAtLeast. 0 means one a second:
// the periodic snapshots carry them (clock.ride).
func tickShare(n int, interval time.Duration) uint64 {
	perSecond := float64(n) * float64(time.Second) / float64(interval)
	every := max(1, int(math.Ceil(perSecond/tickBudget)))
	most := max(1, int(tickAtLeast/interval))
	if every >= most && most > 1 {
		return 0
	}
	return uint64(min(every, most))
}

// tickLoop reads Redis's clock once per tick for all viewers of this instance;
// downAfter failed reads in a row are what mark Redis down for them.
func (v *View) tickLoop(ctx context.Context) {
	t := time.NewTicker(v.d.TickInterval)
	defer t.Stop()
	var round uint64
	failed := 0 // clock reads failed in a row
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tctx, cancel := context.WithTimeout(ctx, probeTimeout)
		now, err := v.d.Redis.Time(tctx).Result()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			v.clock.ride.Store(nil)
			if failed++; failed >= downAfter {
				v.setStatus(false)
			}
			continue
		}
		failed = 0
		v.setStatus(true)
		ms := now.UnixMilli()
		v.clock.last.Store(&reading{redisMs: ms, at: time.Now()})
		tick := TickMessage(ms)
		n := v.hub.Total()
		every := tickShare(n, v.d.TickInterval)
		if every == 0 && !v.snapshotsFailing.Load() && !v.thinned() {
			v.clock.ride.Store(&tick)
			continue
		}
		v.clock.ride.Store(nil)
		if every == 0 { // the snapshots are not going out, or not each second: the clock goes alone
			every = uint64(tickAtLeast / v.d.TickInterval)
		}
		if n > 0 {
			// A large audience gets the clock in turns; the page interpolates.
			v.hub.BroadcastLatestShare(kindTick, tick, every, round)
			round++
		}
	}
}
