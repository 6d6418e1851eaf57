package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func quick(url string) options {
	return options{
		servers: servers{{"s", url}}, viewers: 20, checks: 5, interval: 20 * time.Millisecond,
		rounds: 1, policy: "fan", settle: 100 * time.Millisecond, timeout: 2 * time.Second,
	}
}

// TestProbeTimesEveryDelivery: against the minimal server every viewer reads
// every check's decision, and each check has a time.
func TestProbeTimesEveryDelivery(t *testing.T) {
	srv := httptest.NewServer(newMinimal())
	defer srv.Close()
	got, err := run(context.Background(), quick(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	r := got["s"][0]
	if len(r.last) != 5 || len(r.each) != 5*20 || r.missing != 0 {
		t.Errorf("timed %d checks and %d deliveries, %d missing; want 5, 100, 0", len(r.last), len(r.each), r.missing)
	}
	for _, d := range r.last {
		if d <= 0 || d > 2*time.Second {
			t.Errorf("a check's time to the last viewer is %s", d)
		}
	}
}

// TestProbeCountsWhatNeverArrives: a server that answers checks but sends
// their decisions to no viewer is reported missing, not timed.
func TestProbeCountsWhatNeverArrives(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /ws", newMinimal())
	var n atomic.Int64
	mux.HandleFunc("POST /api/v1/check", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"allowed":true,"id":"lost-%d"}`, n.Add(1))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	o := quick(srv.URL)
	o.checks, o.timeout = 2, 100*time.Millisecond
	got, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r := got["s"][0]; r.missing != 2*20 || len(r.each) != 0 {
		t.Errorf("missing %d, timed %d deliveries; want 40 missing, none timed", r.missing, len(r.each))
	}
}

// TestProbeRefusesADeniedCheck: a check that is not allowed has no decision to
// follow, and the probe says so instead of timing nothing.
func TestProbeRefusesADeniedCheck(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /ws", newMinimal())
	mux.HandleFunc("POST /api/v1/check", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"allowed":false}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if _, err := run(context.Background(), quick(srv.URL)); err == nil {
		t.Error("a denied check was not reported")
	}
}
