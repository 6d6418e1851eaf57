package limiter_test

import (
	"math/rand/v2"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed

	"github.com/ratescope/ratescope/limiter"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestPeriodBounds: a period runs from local midnight to local midnight in
// its zone, whatever the clocks do in between — a month across a DST
// change is an hour short or long, a day 23 or 25 hours — and a week starts
// on Monday. The instants are written in UTC, so each case states where
// the local midnight falls.
func TestPeriodBounds(t *testing.T) {
	for _, tc := range []struct {
		zone       string
		period     limiter.Period
		at         string // an instant inside the period (UTC)
		start, end string
		hours      int
	}{
		// Europe/Berlin springs forward on 30 March 2025 and falls back on
		// 26 October: March has 743 hours, October 745.
		{"Europe/Berlin", limiter.Month, "2025-03-15T12:00:00Z", "2025-02-28T23:00:00Z", "2025-03-31T22:00:00Z", 743},
		{"Europe/Berlin", limiter.Month, "2025-03-31T21:59:59Z", "2025-02-28T23:00:00Z", "2025-03-31T22:00:00Z", 743},
		{"Europe/Berlin", limiter.Month, "2025-03-31T22:00:00Z", "2025-03-31T22:00:00Z", "2025-04-30T22:00:00Z", 720},
		{"Europe/Berlin", limiter.Month, "2025-10-10T00:00:00Z", "2025-09-30T22:00:00Z", "2025-10-31T23:00:00Z", 745},
		{"Europe/Berlin", limiter.Day, "2025-03-30T12:00:00Z", "2025-03-29T23:00:00Z", "2025-03-30T22:00:00Z", 23},
		{"Europe/Berlin", limiter.Day, "2025-10-26T12:00:00Z", "2025-10-25T22:00:00Z", "2025-10-26T23:00:00Z", 25},
		// The week of the change: Monday 24 March to Monday 31 March.
		{"Europe/Berlin", limiter.Week, "2025-03-30T21:59:00Z", "2025-03-23T23:00:00Z", "2025-03-30T22:00:00Z", 167},
		{"Europe/Berlin", limiter.Week, "2025-03-23T23:00:00Z", "2025-03-23T23:00:00Z", "2025-03-30T22:00:00Z", 167},
		{"Europe/Berlin", limiter.Week, "2025-03-23T22:59:59Z", "2025-03-16T23:00:00Z", "2025-03-23T23:00:00Z", 168},
		// America/New_York: 9 March and 2 November 2025.
		{"America/New_York", limiter.Month, "2025-03-01T05:00:00Z", "2025-03-01T05:00:00Z", "2025-04-01T04:00:00Z", 743},
		{"America/New_York", limiter.Month, "2025-03-01T04:59:59Z", "2025-02-01T05:00:00Z", "2025-03-01T05:00:00Z", 672},
		{"America/New_York", limiter.Month, "2025-11-15T00:00:00Z", "2025-11-01T04:00:00Z", "2025-12-01T05:00:00Z", 721},
		{"America/New_York", limiter.Month, "2025-12-31T12:00:00Z", "2025-12-01T05:00:00Z", "2026-01-01T05:00:00Z", 744},
		{"America/New_York", limiter.Day, "2025-03-09T12:00:00Z", "2025-03-09T05:00:00Z", "2025-03-10T04:00:00Z", 23},
		{"America/New_York", limiter.Day, "2025-11-02T12:00:00Z", "2025-11-02T04:00:00Z", "2025-11-03T05:00:00Z", 25},
		// Month ends: a leap February, and a year's end in UTC.
		{"UTC", limiter.Month, "2024-02-29T23:59:59Z", "2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", 696},
		{"UTC", limiter.Month, "2025-12-31T23:59:59Z", "2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z", 744},
		{"UTC", limiter.Week, "2026-01-01T00:00:00Z", "2025-12-29T00:00:00Z", "2026-01-05T00:00:00Z", 168},
		{"UTC", limiter.Day, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", 24},
		// America/Havana springs forward at midnight: 9 March 2025 has no
		// 00:00, and starts at 01:00 CDT. It falls back from 01:00 to 00:00
		// on 2 November: that day starts at the first 00:00.
		{"America/Havana", limiter.Day, "2025-03-08T12:00:00Z", "2025-03-08T05:00:00Z", "2025-03-09T05:00:00Z", 24},
		{"America/Havana", limiter.Day, "2025-03-09T12:00:00Z", "2025-03-09T05:00:00Z", "2025-03-10T04:00:00Z", 23},
		{"America/Havana", limiter.Day, "2025-11-02T04:30:00Z", "2025-11-02T04:00:00Z", "2025-11-03T05:00:00Z", 25},
		{"America/Havana", limiter.Month, "2025-03-09T05:00:00Z", "2025-03-01T05:00:00Z", "2025-04-01T04:00:00Z", 743},
		// America/Santiago springs forward at midnight on 7 September 2025.
		{"America/Santiago", limiter.Day, "2025-09-07T12:00:00Z", "2025-09-07T04:00:00Z", "2025-09-08T03:00:00Z", 23},
		{"America/Santiago", limiter.Week, "2025-09-07T12:00:00Z", "2025-09-01T04:00:00Z", "2025-09-08T03:00:00Z", 167},
		// A zone half an hour off the hour.
		{"Asia/Kolkata", limiter.Day, "2025-06-01T18:29:59Z", "2025-05-31T18:30:00Z", "2025-06-01T18:30:00Z", 24},
	} {
		start, end := tc.period.Bounds(utc(tc.at), zone(t, tc.zone))
		if !start.Equal(utc(tc.start)) || !end.Equal(utc(tc.end)) || end.Sub(start) != time.Duration(tc.hours)*time.Hour {
			t.Errorf("%s %s at %s: [%s, %s) of %v, want [%s, %s) of %d h", tc.zone, tc.period, tc.at,
				start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), end.Sub(start), tc.start, tc.end, tc.hours)
		}
	}
}

// TestPeriodBoundsTile: for random instants over three years in zones with
// and without clock changes (at midnight too), every period holds its
// instant, starts at the first instant of its local date — a Monday for a
// week, the 1st for a month — and ends where the next one starts: periods
// tile time, with no gap and no overlap.
func TestPeriodBoundsTile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	from, to := utc("2024-01-01T00:00:00Z").Unix(), utc("2027-01-01T00:00:00Z").Unix()
	for _, name := range []string{"UTC", "Europe/Berlin", "America/New_York", "America/Havana", "America/Santiago", "Australia/Lord_Howe", "Asia/Kathmandu"} {
		loc := zone(t, name)
		for range 3000 {
			at := time.Unix(from+rng.Int64N(to-from), rng.Int64N(1e9))
			for _, pd := range []limiter.Period{limiter.Day, limiter.Week, limiter.Month} {
				start, end := pd.Bounds(at, loc)
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%s %s at %v: [%v, %v) does not hold it", name, pd, at, start, end)
				}
				if next, _ := pd.Bounds(end, loc); !next.Equal(end) {
					t.Fatalf("%s %s at %v: ends %v, the next starts %v", name, pd, at, end, next)
				}
				if before := start.Add(-time.Nanosecond).In(loc); sameDate(before, start.In(loc)) {
					t.Fatalf("%s %s at %v: starts %v, yet %v is on the same date", name, pd, at, start.In(loc), before)
				}
				s := start.In(loc)
				switch {
				case pd == limiter.Week && s.Weekday() != time.Monday:
					t.Fatalf("%s week at %v starts on %v", name, at, s)
				case pd == limiter.Month && s.Day() != 1:
					t.Fatalf("%s month at %v starts on %v", name, at, s)
				case pd == limiter.Day && !sameDate(s, at.In(loc)):
					t.Fatalf("%s day at %v starts on %v", name, at.In(loc), s)
				}
			}
		}
	}
}

func sameDate(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd
}
