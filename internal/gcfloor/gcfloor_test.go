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

// cycles counts the collections while 256 MiB of short-lived garbage is
// allocated with almost nothing alive.
func cycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	for range 256 << 10 {
		sink = make([]byte, 1024)
	}
	metrics.Read(s)
	return s[0].Value.Uint64() - before
}

func gcPercent() int {
	p := debug.SetGCPercent(defaultPercent)
	debug.SetGCPercent(p)
	return p
}

func TestKeepCollectsLessOftenAndStops(t *testing.T) {
	debug.SetGCPercent(defaultPercent) // whatever GOGC the test runs under
	runtime.GC()
	without := cycles()
	stop := Keep(32<<20, func(string) string { return "" })
	runtime.GC() // the first tune after a collection
	with := cycles()
	again := Keep(32<<20, func(string) string { return "" }) // a second server in the process
	stop()
	if p := gcPercent(); p == defaultPercent {
		t.Errorf("GOGC back to %d while a second caller still keeps the floor", p)
	}
	again()
	again() // stopping twice is harmless
	after := gcPercent()
	t.Logf("collections over 256 MiB of garbage: %d without the floor, %d with it", without, with)
	// 4 MiB goal without: ~64 cycles; 32 MiB with: ~8.
	if with*3 > without {
		t.Errorf("%d collections with a 32 MiB floor against %d without: want at most a third", with, without)
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
