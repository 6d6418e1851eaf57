package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		floor, live, scanned uint64
		want                 int
	}{
		{32 * mib, 0, 0, 800},             // nothing measured yet: the most
		{32 * mib, 1 * mib, 0, 800},       // 3,100 would lift the runtime's minimum to 124 MiB
		{32 * mib, 8 * mib, 0, 300},       // 8 + 8 × 3 = the floor
		{32 * mib, 8 * mib, 8 * mib, 150}, // stacks count: 8 + 16 × 1.5 = the floor
		{32 * mib, 2 * mib, 28 * mib, 100},
		{32 * mib, 16 * mib, 0, 100}, // half the floor: the default
		{32 * mib, 200 * mib, 0, 100},
	} {
		if got := percent(c.floor, c.live, c.scanned); got != c.want {
			t.Errorf("percent(%d MiB, %d MiB live, %d MiB scanned) = %d, want %d", c.floor/mib, c.live/mib, c.scanned/mib, got, c.want)
		}
	}
}

// The floor follows the heap after every collection: the default with much
// alive, raised again once it is freed, and no more after the last stop.
func TestKeepFollowsTheHeap(t *testing.T) {
	debug.SetGCPercent(defaultPercent)
	stop := Keep(32<<20, func(string) string { return "" })
	defer stop()
	until := func(what string, ok func(p int) bool) {
		t.Helper()
		for range 200 {
			runtime.GC()
			if ok(gcPercent()) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s: GOGC = %d", what, gcPercent())
	}
	sink = make([]byte, 24<<20)
	until("24 MiB alive, want the default", func(p int) bool { return p == defaultPercent })
	sink = nil
	until("freed, want GOGC raised again", func(p int) bool { return p > defaultPercent })
	stop()
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if p := gcPercent(); p != defaultPercent {
		t.Errorf("GOGC = %d after the last stop and three collections, want %d", p, defaultPercent)
	}
}

var sink []byte

// heapGoal is the heap size at which the runtime collects next.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func gcPercent() int {
	p := debug.SetGCPercent(defaultPercent)
	debug.SetGCPercent(p)
	return p
}

// The goal, not a count of collections: how many collections a volume of
// garbage takes varies with the machine's load (27 to 84 without the floor),
// the goal the runtime sets does not.
func TestKeepRaisesTheHeapGoalAndStops(t *testing.T) {
	debug.SetGCPercent(defaultPercent) // whatever GOGC the test runs under
	runtime.GC()
	without := heapGoal()
	stop := Keep(32<<20, func(string) string { return "" })
	with := heapGoal()
	again := Keep(32<<20, func(string) string { return "" }) // a second server in the process
	stop()
	if p := gcPercent(); p == defaultPercent {
		t.Errorf("GOGC back to %d while a second caller still keeps the floor", p)
	}
	again()
	again() // stopping twice is harmless
	after := gcPercent()
	t.Logf("heap goal %d KiB without the floor, %d KiB with it", without>>10, with>>10)
	if without > 8<<20 {
		t.Errorf("heap goal %d KiB without the floor: want the runtime's 4 MiB for this test's small heap", without>>10)
	}
	if with < 28<<20 || with > 36<<20 {
		t.Errorf("heap goal %d KiB with a 32 MiB floor, want about 32 MiB", with>>10)
	}
	if after != defaultPercent {
		t.Errorf("GOGC = %d after every caller stopped, want %d", after, defaultPercent)
	}
}

func TestKeepLeavesAnOperatorsGOGC(t *testing.T) {
	debug.SetGCPercent(150)
	defer debug.SetGCPercent(defaultPercent)
	stop := Keep(32<<20, func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	})
	runtime.GC()
	runtime.GC()
	stop()
	if p := gcPercent(); p != 150 {
		t.Errorf("GOGC = %d with GOGC=150 in the environment, want 150 untouched", p)
	}
}
