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
)

// A minute's counts are upper bounds. A key a summary holds is counted at
// most the summary's floor (its smallest count, when full) too high; a key it
// does not hold had at most that floor there, and is counted as if it had
// it. So for every key, count ≥ its true count ≥ count − the sum of the
// floors (≤ the policy's checks / Counters), and a key of at least
// 1/MinShareOf of the checks always counts at least that much: it is always
// listed.

// estimates sums counts per key over several summaries (buckets, or
// instances' minutes), each with the floor a key absent from it may have had
// there.
type estimates struct {
	count map[string]int64 // summed over the summaries holding the key
	held  map[string]int64 // the floors of the summaries holding it
	floor int64            // the floors of all summaries
}

func newEstimates() estimates {
	return estimates{count: map[string]int64{}, held: map[string]int64{}}
}

// add adds a summary's count of key, whose floor is floor.
func (e *estimates) add(key string, n, floor int64) {
	e.count[key] += n
	e.held[key] += floor
}

// of is key's estimate: an upper bound of its true count.
func (e *estimates) of(key string) int64 { return e.count[key] + e.floor - e.held[key] }

// minute is a policy's heaviest keys over the last minute, of one instance
// or merged from several.
type minute struct {
	checks  estimates        // by checks
	tallied map[string]int64 // each key's denials while it held a counter of checks
	denials estimates        // by denials (would-denials)
	total   int64            // the policy's checks
	denied  int64            // the policy's denials (would-denials)
}

func newMinute() *minute {
	return &minute{checks: newEstimates(), tallied: map[string]int64{}, denials: newEstimates()}
}

// addSummaries adds one bucket's summaries.
func (m *minute) addSummaries(checks, denials *summary) {
	cf, df := checks.floor(), denials.floor()
	for _, c := range checks.counters {
		m.checks.add(c.key, c.count, cf)
		m.tallied[c.key] += c.tally
	}
	for _, c := range denials.counters {
		m.denials.add(c.key, c.count, df)
	}
	m.checks.floor += cf
	m.denials.floor += df
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
		m.checks.add(r.Key, r.Checks, o.Floor)
		m.tallied[r.Key] += r.Denied
	}
	for _, r := range o.Denials {
		m.denials.add(r.Key, r.Denied, o.DeniedFloor)
	}
	m.checks.floor += o.Floor
	m.denials.floor += o.DeniedFloor
	m.total += o.Total
	m.denied += o.Denied
}

// Row is one key of a top list: its checks and its denials (for a shadow
// policy its would-denials) in the last minute.
type Row struct {
	Key    string `json:"key"`
	Checks int64  `json:"checks"`
	Denied int64  `json:"denied"`
	// Override names the per-client override in force for the key ("key"
	// or "prefix:<prefix>"); absent when its policy's own rules apply.
	Override string `json:"override,omitempty"`
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
	byChecks := make([]Row, 0, len(m.checks.count))
	for k := range m.checks.count {
		checks := m.checks.of(k)
		byChecks = append(byChecks, Row{Key: k, Checks: checks, Denied: m.deniedOf(k, checks)})
	}
	byDenials := make([]Row, 0, len(m.denials.count))
	for k := range m.denials.count {
		if d := m.denials.of(k); d > 0 {
			byDenials = append(byDenials, Row{Key: k, Checks: max(m.checks.of(k), d), Denied: d})
		}
	}
	return Top{
		Checks: heaviest(byChecks, m.total, func(r Row) int64 { return r.Checks }),
		Denied: heaviest(byDenials, m.denied, func(r Row) int64 { return r.Denied }),
	}
}

// deniedOf is a key's denials: from the summary of denials when it holds the
// key there (the closer count), else the tally of its checks' counter.
func (m *minute) deniedOf(k string, checks int64) int64 {
	if _, ok := m.denials.count[k]; ok {
		return min(m.denials.of(k), checks)
	}
	return m.tallied[k]
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

// sentRows is how many keys of each list an instance sends the others: its
// heaviest. A key it does not send may have had at most the largest
// estimate left out (or the floor, when none is): that is the floor the
// others count it at, so estimates stay upper bounds, too high by at most
// the policy's checks × (1/Counters + 1/sentRows) over all instances.
const sentRows = Counters

// wire is m as an instance sends it: the heaviest sentRows keys of each
// list with their estimates, and the floor of a key not sent.
func (m *minute) wire() wireTop {
	w := wireTop{Total: m.total, Denied: m.denied}
	w.Checks, w.Floor = heaviestSent(&m.checks, func(k string, n int64) wireRow {
		return wireRow{Key: k, Checks: n, Denied: m.tallied[k]}
	})
	w.Denials, w.DeniedFloor = heaviestSent(&m.denials, func(k string, n int64) wireRow {
		return wireRow{Key: k, Denied: n}
	})
	return w
}

// heaviestSent lists the sentRows keys of e with the largest estimates, and
// the most a key left out may have had.
func heaviestSent(e *estimates, row func(key string, n int64) wireRow) ([]wireRow, int64) {
	type est struct {
		key string
		n   int64
	}
	all := make([]est, 0, len(e.count))
	for k := range e.count {
		all = append(all, est{k, e.of(k)})
	}
	floor := e.floor
	if len(all) > sentRows {
		slices.SortFunc(all, func(a, b est) int { return cmp.Compare(b.n, a.n) })
		floor = max(floor, all[sentRows].n)
		all = all[:sentRows]
	}
	rows := make([]wireRow, len(all))
	for i, x := range all {
		rows[i] = row(x.key, x.n)
	}
	return rows, floor
}
