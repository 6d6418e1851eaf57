package overview

import (
	"cmp"
	"slices"
)

// The top lists: TopRows keys with the most checks and TopRows with the
// most denials, and beyond them every key holding at least 1/MinShareOf of
// the policy's checks (or denials), up to MaxRows: a heavy client is never
// cut off by the length of the list.
const (
	TopRows    = 20
	MinShareOf = 100 // 1 %
	MaxRows    = MinShareOf

	// sentRows is how many keys of each list an instance sends others: with
	// Counters of them a key's share missing from a merge is at most
	// 1/sentRows of the policy's checks, as a summary's own error is.
	sentRows = Counters
)

// tally is what the minute holds of one key: its checks (an overestimate
// by at most the policy's checks / Counters) and the denials counted while
// it held its counter.
type tally struct {
	checks, denied int64
}

// minute is a policy's heaviest keys over the last minute, of one instance
// or merged from several.
type minute struct {
	checks  map[string]tally // by checks
	denials map[string]int64 // by denials
	total   int64            // the policy's checks
	denied  int64            // the policy's denials (would-denials)
}

func newMinute() *minute {
	return &minute{checks: map[string]tally{}, denials: map[string]int64{}}
}

// addSummaries adds one bucket's summaries.
func (m *minute) addSummaries(checks, denials *summary) {
	for _, c := range checks.counters {
		t := m.checks[c.key]
		t.checks += c.count
		t.denied += c.tally
		m.checks[c.key] = t
	}
	for _, c := range denials.counters {
		m.denials[c.key] += c.count
	}
	m.total += checks.total
	m.denied += denials.total
}

// minute merges the buckets of the minute that ends at nowMs.
func (p *policyCounts) minute(nowMs int64) *minute {
	m := newMinute()
	first := nowMs/BucketMs - (Buckets - 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.buckets {
		if b := &p.buckets[i]; b.checks != nil && b.at >= first {
			m.addSummaries(b.checks, b.denials)
		}
	}
	return m
}

// merge adds another instance's minute.
func (m *minute) merge(o wireTop) {
	for _, r := range o.Checks {
		t := m.checks[r.Key]
		t.checks += r.Checks
		t.denied += r.Denied
		m.checks[r.Key] = t
	}
	for _, r := range o.Denials {
		m.denials[r.Key] += r.Denied
	}
	m.total += o.Total
	m.denied += o.Denied
}

// Row is one key of a top list: its checks and its denials (for a shadow
// policy its would-denials) in the last minute.
type Row struct {
	Key    string `json:"key"`
	Checks int64  `json:"checks"`
	Denied int64  `json:"denied"`
}

// Top is a policy's top lists: by checks and by denials.
type Top struct {
	Checks []Row `json:"checks"`
	Denied []Row `json:"denied"`
}

// top lists the keys with the most checks and with the most denials, each
// the first TopRows and every further key of at least 1/MinShareOf of the
// total (MaxRows at most).
func (m *minute) top() Top {
	byChecks := make([]Row, 0, len(m.checks))
	for k, t := range m.checks {
		byChecks = append(byChecks, Row{Key: k, Checks: t.checks, Denied: m.deniedOf(k, t)})
	}
	byDenials := make([]Row, 0, len(m.denials))
	for k, d := range m.denials {
		if d > 0 {
			byDenials = append(byDenials, Row{Key: k, Checks: max(m.checks[k].checks, d), Denied: d})
		}
	}
	return Top{
		Checks: heaviest(byChecks, m.total, func(r Row) int64 { return r.Checks }),
		Denied: heaviest(byDenials, m.denied, func(r Row) int64 { return r.Denied }),
	}
}

// deniedOf is a key's denials: from the summary of denials when it holds the
// key there (the closer count), else the tally of its checks' counter.
func (m *minute) deniedOf(k string, t tally) int64 {
	if d, ok := m.denials[k]; ok {
		return min(d, t.checks)
	}
	return t.denied
}

// heaviest sorts rows by weight, heaviest first (ties by key), and keeps the
// first TopRows and those after them of at least total/MinShareOf.
func heaviest(rows []Row, total int64, weight func(Row) int64) []Row {
	slices.SortFunc(rows, func(a, b Row) int {
		if c := cmp.Compare(weight(b), weight(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	n := min(len(rows), TopRows)
	for n < len(rows) && n < MaxRows && weight(rows[n])*MinShareOf >= total {
		n++
	}
	return slices.Clip(rows[:n])
}

// wire is m as an instance sends it: the heaviest sentRows of each list.
func (m *minute) wire() wireTop {
	w := wireTop{Total: m.total, Denied: m.denied}
	checks := make([]wireRow, 0, len(m.checks))
	for k, t := range m.checks {
		checks = append(checks, wireRow{Key: k, Checks: t.checks, Denied: t.denied})
	}
	denials := make([]wireRow, 0, len(m.denials))
	for k, d := range m.denials {
		denials = append(denials, wireRow{Key: k, Denied: d})
	}
	w.Checks = firstRows(checks, func(r wireRow) int64 { return r.Checks })
	w.Denials = firstRows(denials, func(r wireRow) int64 { return r.Denied })
	return w
}

func firstRows(rows []wireRow, weight func(wireRow) int64) []wireRow {
	if len(rows) > sentRows {
		slices.SortFunc(rows, func(a, b wireRow) int { return cmp.Compare(weight(b), weight(a)) })
		rows = rows[:sentRows]
	}
	return rows
}
