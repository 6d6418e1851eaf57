package limiter

import (
	"fmt"
	"sync"
	"time"
)

// Period is the calendar period a quota rule counts over: Day, Week (from
// Monday 00:00) or Month, in its policy's time zone (Policy.Timezone). A
// sliding-window rule has none ("").
type Period string

// The calendar periods of quota rules, "LIMIT/day", "LIMIT/week" and
// "LIMIT/month" in a policy.
const (
	Day   Period = "day"
	Week  Period = "week"
	Month Period = "month"
)

// periods lists them in the order a policy's quota rules are sorted.
var periods = []Period{Day, Week, Month}

// order is p's place in periods, -1 for an unknown one.
func (p Period) order() int {
	for i, q := range periods {
		if q == p {
			return i
		}
	}
	return -1
}

// Bounds is the period of kind p holding t, in loc: [start, end). Both are
// local midnights — of that day, of that week's Monday, of that month's 1st
// — so a day lasts 23 or 25 hours where the clocks change, and a month
// whatever its days and changes add up to. Where a zone skips midnight (a
// change at 00:00, as in America/Havana), the day starts when its clock
// does; where midnight comes twice, at the first.
func (p Period) Bounds(t time.Time, loc *time.Location) (start, end time.Time) {
	s := p.starts(t, loc)
	return s[1], s[2]
}

// starts are the starts of the period of kind p before the one holding t,
// of that one and of the two after it: the bounds of three periods, which
// a decision script picks among by Redis's clock.
func (p Period) starts(t time.Time, loc *time.Location) [4]time.Time {
	y, m, d := t.In(loc).Date()
	var out [4]time.Time
	for i := range out {
		k := i - 1
		switch p {
		case Day:
			out[i] = midnight(y, m, d+k, loc)
		case Week:
			monday := d - (int(t.In(loc).Weekday())+6)%7
			out[i] = midnight(y, m, monday+7*k, loc)
		default: // Month
			out[i] = midnight(y, m+time.Month(k), 1, loc)
		}
	}
	return out
}

// midnight is the first instant of the local date y-m-d (normalized as
// time.Date does) in loc.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	s := time.Date(y, m, d, 0, 0, 0, 0, loc)
	ty, tm, td := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
	if sy, sm, sd := s.Date(); sy != ty || sm != tm || sd != td {
		// Midnight fell in a gap and Date answered an instant of the day
		// before: the day starts where that zone ends, at the change.
		_, end := s.ZoneBounds()
		return end
	}
	// Where the clocks went back across midnight, 00:00 happens twice:
	// the day starts at the first.
	if start, _ := s.ZoneBounds(); !start.IsZero() {
		_, before := start.Add(-time.Nanosecond).Zone()
		_, after := s.Zone()
		if back := time.Duration(before-after) * time.Second; back > 0 && s.Sub(start) < back {
			return s.Add(-back)
		}
	}
	return s
}

// zones caches the time zones policies name: loading one reads the zone
// database, which a check should not do each time.
var zones sync.Map // name → *time.Location

// loadZone loads the IANA zone name ("" is UTC). "Local" is refused: a
// policy must mean the same on every machine.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("time zone %q differs from machine to machine: name an IANA zone such as Europe/Berlin, or UTC", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: want an IANA zone name such as Europe/Berlin, America/New_York or UTC", name)
	}
	zones.Store(name, loc)
	return loc, nil
}

// Location is the time zone p's quota rules count their days, weeks and
// months in: Timezone, or UTC when it is empty. An error names a Timezone
// no zone has (ParsePolicy refuses those).
func (p Policy) Location() (*time.Location, error) { return loadZone(p.Timezone) }

// HasQuotas reports whether p has a calendar quota rule.
func (p Policy) HasQuotas() bool {
	for _, r := range p.Rules {
		if r.Period != "" {
			return true
		}
	}
	return false
}
