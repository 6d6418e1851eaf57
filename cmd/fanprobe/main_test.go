package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestProbeCountsChecksNotAnswered200: checks answered 503, 429 or not at
// all are counted by answer, not timed and not taken for missing decisions;
// the checks answered 200 are timed as usual, and the probe fails once it
// has reported them all.
func TestProbeCountsChecksNotAnswered200(t *testing.T) {
	minimal := newMinimal()
	mux := http.NewServeMux()
	mux.Handle("GET /ws", minimal)
	var n atomic.Int64
	mux.HandleFunc("POST /api/v1/check", func(w http.ResponseWriter, r *http.Request) {
		switch (n.Add(1)-1)%5 + 1 { // the same answers in every run
		case 2, 4:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"title":"Service Unavailable"}`)
		case 5:
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"allowed":false}`)
		default:
			minimal.ServeHTTP(w, r)
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	o := quick(srv.URL)
	got, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	r := got["s"][0]
	if r.failures() != 3 || r.answers() != "3 (1 × 429, 2 × 503)" {
		t.Errorf("checks not answered 200: %s; want 3 (1 × 429, 2 × 503)", r.answers())
	}
	if len(r.last) != 2 || len(r.each) != 2*20 || r.missing != 0 {
		t.Errorf("timed %d checks and %d deliveries, %d missing; want 2, 40, 0", len(r.last), len(r.each), r.missing)
	}
	err = probe(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "3 of 5 checks were not answered 200") {
		t.Errorf("the probe's verdict: %v; want 3 of 5 checks not answered 200", err)
	}
}

// TestProbeCountsAChecksMissingAnswer: a server that closes the connection
// instead of answering a check has the check counted as "error".
func TestProbeCountsAChecksMissingAnswer(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /ws", newMinimal())
	mux.HandleFunc("POST /api/v1/check", func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	o := quick(srv.URL)
	o.checks = 2
	got, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r := got["s"][0]; r.answers() != "2 (2 × error)" || r.missing != 0 {
		t.Errorf("checks not answered 200: %s, %d missing; want 2 (2 × error), 0", r.answers(), r.missing)
	}
}
