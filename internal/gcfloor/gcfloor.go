// Package gcfloor keeps the Go heap's collection goal at or above a floor
// while the live heap is small.
//
// A rate limiter keeps little alive (a few MB) but allocates per request, so
// with the runtime's default (GOGC=100, a 4 MB minimum goal) a busy instance
// collects dozens of times a second. Each collection also shrinks the stacks
// of idle goroutines (the gRPC service's workers among them), which the next
// call grows again. Raising GOGC while the live heap is small lets the heap
// reach the floor between collections; once the live heap passes half the
// floor the runtime's default applies unchanged, so a large live heap (many
// viewers) costs no more memory than before.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// defaultPercent is the runtime's GOGC when the environment sets none.
const defaultPercent = 100

// runtimeMinimum is the runtime's minimum heap goal at GOGC=100; it scales
// with GOGC.
const runtimeMinimum = 4 << 20

var (
	mu    sync.Mutex
	users int    // Keep calls not yet stopped
	floor uint64 // of the first of them
	gen   int    // which chain of sentinels is current
)

// Keep raises GOGC while the live heap is below floor/2 so that the heap
// grows to about floor bytes before the next collection, and returns the
// function that ends it (restoring GOGC=100 once every caller has stopped).
// It does nothing when getenv("GOGC") is set: the operator has chosen. The
// first caller's floor holds until all callers stop.
func Keep(floorBytes uint64, getenv func(string) string) (stop func()) {
	if getenv("GOGC") != "" || floorBytes < 2*runtimeMinimum {
		return func() {}
	}
	mu.Lock()
	defer mu.Unlock()
	users++
	if users == 1 {
		floor, gen = floorBytes, gen+1
		tune(floor)
		arm(gen)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if users--; users == 0 {
				gen++ // the running chain ends at its next collection
				debug.SetGCPercent(defaultPercent)
			}
		})
	}
}

// sentinel is garbage the moment it is made: its finalizer runs after each
// collection and re-arms itself, so tune runs once per cycle. The pointer
// keeps it out of the tiny allocator, whose objects may never be finalized.
type sentinel struct {
	gen int
	_   *byte
}

func arm(g int) {
	runtime.SetFinalizer(&sentinel{gen: g}, func(s *sentinel) {
		mu.Lock()
		defer mu.Unlock()
		if s.gen != gen {
			return
		}
		tune(floor)
		arm(s.gen)
	})
}

var live = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}

// tune sets GOGC for the live heap now: the percent that puts the goal at
// floor, at least the default and at most what keeps the runtime's own
// minimum goal (which scales with GOGC) within floor.
func tune(floor uint64) {
	metrics.Read(live)
	l := uint64(0)
	if live[0].Value.Kind() == metrics.KindUint64 {
		l = live[0].Value.Uint64()
	}
	debug.SetGCPercent(percent(floor, l))
}

// percent is the GOGC that keeps a heap of liveBytes collecting at about
// floor bytes: floor/live − 1 in percent, within [100, floor/4 MiB·100].
func percent(floor, liveBytes uint64) int {
	most := int(floor * defaultPercent / runtimeMinimum)
	if liveBytes == 0 {
		return most
	}
	p := int(floor*defaultPercent/liveBytes) - defaultPercent
	return max(defaultPercent, min(p, most))
}
