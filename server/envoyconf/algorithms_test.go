package envoyconf_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/envoyconf"
)

// unitsByLength are the rate_limit units, shortest first.
func unitsByLength() []envoyconf.Unit {
	var us []envoyconf.Unit
	for v := range rlsv3.RateLimitResponse_RateLimit_Unit_name {
		if _, ok := envoyconf.UnitLength(envoyconf.Unit(v)); ok {
			us = append(us, envoyconf.Unit(v))
		}
	}
	slices.SortFunc(us, func(a, b envoyconf.Unit) int {
		la, _ := envoyconf.UnitLength(a)
		lb, _ := envoyconf.UnitLength(b)
		return int(la - lb)
	})
	return us
}

// parseOne parses a file of one limit under algorithm ("": the default).
func parseOne(algorithm string, unit envoyconf.Unit, limit int64) (*envoyconf.Set, error) {
	f := "domain: d\n"
	if algorithm != "" {
		f += "algorithm: " + algorithm + "\n"
	}
	f += fmt.Sprintf("descriptors:\n  - key: k\n    rate_limit: {unit: %s, requests_per_unit: %d}\n", strings.ToLower(unit.String()), limit)
	return envoyconf.Parse([]envoyconf.File{{Name: "d.yaml", Data: []byte(f)}}, envoyconf.Options{})
}

// TestBoundsAreTheAlgorithmTables: what a file may ask of each algorithm is
// what limiter.Algorithms says it decides exactly — its largest limit
// (ExactLimit, within a file's uint32) and longest window (ExactWindow) —
// and a limit beyond an algorithm that keeps an entry per request falls
// back to fixed windows where the file chose no algorithm, or in an
// override. An algorithm added to the table, or a bound changed there, is
// bounded here without naming it.
func TestBoundsAreTheAlgorithmTables(t *testing.T) {
	units := unitsByLength()
	second := units[0]
	for _, d := range limiter.Algorithms() {
		name := string(d.Name)
		t.Run(name, func(t *testing.T) {
			top := min(int64(d.ExactLimit), math.MaxUint32)
			s, err := parseOne(name, second, top)
			if err != nil || len(s.Policies()) != 1 || s.Policies()[0].Algorithm != d.Name || s.Policies()[0].Rules[0].Limit != int(top) {
				t.Fatalf("requests_per_unit %d (its ExactLimit): %v, %v", top, s, err)
			}
			if top < math.MaxUint32 {
				_, err := parseOne(name, second, top+1)
				if want := fmt.Sprintf("requests_per_unit (line 5): %d is more than", top+1); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("(%d)", top)) {
					t.Errorf("requests_per_unit %d: %v, want it refused (%q)", top+1, err, want)
				}
			}
			for _, u := range units {
				length, _ := envoyconf.UnitLength(u)
				_, err := parseOne(name, u, 1)
				fits := d.ExactWindow == 0 || length <= d.ExactWindow
				if fits && err != nil {
					t.Errorf("unit %s (%v, ExactWindow %v): %v", u, length, d.ExactWindow, err)
				}
				if !fits && (err == nil || !strings.Contains(err.Error(), "unit (line 5): "+strings.ToLower(u.String())+" is longer than "+name)) {
					t.Errorf("unit %s (%v, ExactWindow %v): %v, want it refused", u, length, d.ExactWindow, err)
				}
			}
			if top == math.MaxUint32 {
				return
			}
			// An override beyond it: fixed windows decide it if it keeps an
			// entry per request; the others are left to decide it.
			minute := limiter.Policy{Name: "d.k", Rules: []limiter.Rule{{Limit: 1, Window: time.Minute}}}
			p, ok := envoyconf.Override(limiter.Policy{Algorithm: d.Name}, minute, uint32(top+1), rlsv3.RateLimitResponse_RateLimit_MINUTE)
			want := d.Name
			if d.Entries {
				want = limiter.Fixed
			}
			if !ok || p.Algorithm != want || p.Rules[0].Limit != int(top+1) {
				t.Errorf("an override of %d: %v (%v), want it decided by %s", top+1, p, ok, want)
			}
		})
	}
	// A file that names no algorithm gets the log; a limit beyond it is
	// decided by fixed windows, with a warning.
	logd, _ := limiter.Describe(limiter.Log)
	s, err := parseOne("", second, int64(logd.ExactLimit)+1)
	if err != nil || s.Policies()[0].Algorithm != limiter.Fixed || len(s.Warnings()) != 1 {
		t.Fatalf("the default algorithm beyond the log's ExactLimit: %v, %v", s, err)
	}
}
