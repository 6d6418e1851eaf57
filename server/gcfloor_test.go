package server_test

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// gogc reads the GOGC in force from a server's /metrics.
func gogc(t *testing.T, a *apptest.App) int {
	t.Helper()
	resp, err := http.Get(a.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_gc_gogc_percent "); ok {
			p, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(p)
		}
	}
	t.Fatalf("/metrics has no go_gc_gogc_percent (%v)", sc.Err())
	return 0
}

// A server with a small heap lets it grow before collecting, and says so in
// /metrics; GOGC in its environment is left to the operator. Each server
// has a process of its own, so nothing another test left alive counts.
func TestAServerWithASmallHeapCollectsLessOften(t *testing.T) {
	url := redistest.URL(t)
	if p := gogc(t, apptest.StartProcess(t, map[string]string{"REDIS_URL": url}, 0)); p <= 100 {
		t.Errorf("go_gc_gogc_percent = %d, want it raised above 100 for a fresh server's small heap", p)
	}
	if p := gogc(t, apptest.StartProcess(t, map[string]string{"REDIS_URL": url, "GOGC": "100"}, 0)); p != 100 {
		t.Errorf("go_gc_gogc_percent = %d with GOGC=100 in the server's environment, want it left alone", p)
	}
}
