package server_test

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// A running server lets its small heap grow before collecting, and gives the
// runtime's default back when it stops; GOGC in its environment is left to
// the operator.
func TestARunningServerCollectsLessOften(t *testing.T) {
	debug.SetGCPercent(100)
	runtime.GC() // what the tests before left alive is gone
	a := startApp(t, nil)
	if p := gcPercent(); p <= 100 {
		t.Errorf("GOGC = %d while the server runs, want it raised above 100 for its small heap", p)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	if p := gcPercent(); p != 100 {
		t.Errorf("GOGC = %d after the server stopped, want 100 back", p)
	}

	b := startApp(t, map[string]string{"GOGC": "100"})
	defer b.Stop()
	if p := gcPercent(); p != 100 {
		t.Errorf("GOGC = %d with GOGC=100 in the server's environment, want it left alone", p)
	}
}
