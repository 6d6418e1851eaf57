// Package gcfloor keeps the Go heap's collection goal at or above a floor
// while the live heap is small.
//
// A rate limiter keeps little alive (a few MB) but allocates per request, so
// with the runtime's default (GOGC=100, a 4 MB minimum goal) a busy instance
// collects dozens of times a second. Each collection also shrinks the stacks
// of idle goroutines (the gRPC service's workers among them), which the next
// call grows again. Raising GOGC while little is alive lets the heap reach
// the floor between collections; once the live heap and the goroutine
// stacks reach about half the floor the runtime's default applies
// unchanged, so an instance that keeps much alive (many viewers) costs no
// more memory than before.
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
	mu     sync.Mutex
	users  int    // Keep calls not yet stopped
	floor  uint64 // of the first of them
	gen    int    // which chain of sentinels is current
	before int    // GOGC when the first of them started, restored after the last
)

// Keep raises GOGC while the live heap is small so that the heap grows to
// about floor bytes before the next collection, and returns the function
// that ends it (restoring the GOGC it found once every caller has stopped).
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
		before = tune(floor)
		arm(gen)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if users--; users == 0 {
				gen++ // the running chain ends at its next collection
				debug.SetGCPercent(before)
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

// heap is what the runtime's goal is made of: the live heap, and the
// goroutine stacks and globals it scans, which GOGC also scales.
var heap = []metrics.Sample{
	{Name: "/gc/heap/live:bytes"},
	{Name: "/gc/scan/stack:bytes"},
	{Name: "/gc/scan/globals:bytes"},
}

// tune sets GOGC for the heap now (see percent) and returns the GOGC it
// replaced.
func tune(floor uint64) int {
	metrics.Read(heap)
	var v [3]uint64
	for i, m := range heap {
		if m.Value.Kind() == metrics.KindUint64 {
			v[i] = m.Value.Uint64()
		}
	}
	return debug.SetGCPercent(percent(floor, v[0], v[1]+v[2]))
}

// percent is the GOGC that puts the runtime's heap goal, live + (live +
// scanned)·GOGC/100, at about floor: at least the default, and at most what
// keeps the runtime's own minimum goal (4 MiB·GOGC/100) within floor.
func percent(floor, live, scanned uint64) int {
	most := int(floor * defaultPercent / runtimeMinimum)
	if live >= floor {
		return defaultPercent
	}
	if live+scanned == 0 {
		return most
	}
	p := (floor - live) * defaultPercent / (live + scanned)
	return max(defaultPercent, int(min(p, uint64(most))))
}
