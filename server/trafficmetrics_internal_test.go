package server

import (
	"strconv"
	"testing"
)

// TestRouteSeriesAllocateNothing: once a route's code has been seen, counting
// and timing a request resolves no labels and allocates nothing.
func TestRouteSeriesAllocateNothing(t *testing.T) {
	m := newMetrics()
	h := &httpMetrics{m: m, routes: map[string]*routeSeries{"/api/v1/check": newRouteSeries(m.httpRequests, m.httpDuration, "/api/v1/check")}}
	h.routes["/api/v1/check"].count(429, strconv.Itoa)
	path := "/api/v1/check"
	if n := testing.AllocsPerRun(1000, func() {
		s := h.routes[path]
		s.duration.Observe(0.001)
		s.count(429, strconv.Itoa)
	}); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}
