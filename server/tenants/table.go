package tenants

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ratescope/ratescope/limiter/httplimit"
)

// entry is one override as an instance holds it, with the policy its rules
// make of the policy in force (policyFor), derived on first use.
type entry struct {
	o       Override
	derived atomic.Pointer[derived]
}

// derived is the override's policy for one base policy: a reload makes a new
// base, and the next check derives again.
type derived struct {
	base, pol *httplimit.Policy
}

// policyFor is base with e's rules, or base itself when they do not fit its
// algorithm (a reload changed it since the override was stored).
func (e *entry) policyFor(base *httplimit.Policy) *httplimit.Policy {
	if d := e.derived.Load(); d != nil && d.base == base {
		return d.pol
	}
	pol := base
	if rules, err := ParseRules(base.Policy, e.o.Rules); err == nil {
		pol = base.WithRules(rules, e.o.Label())
	}
	e.derived.Store(&derived{base: base, pol: pol})
	return pol
}

// table maps keys and prefixes to their overrides. In a delta, a nil entry
// says the override is gone.
type table struct {
	keys     map[string]*entry
	prefixes map[string]*entry
}

func newTable() *table {
	return &table{keys: map[string]*entry{}, prefixes: map[string]*entry{}}
}

func (t *table) side(prefix bool) map[string]*entry {
	if prefix {
		return t.prefixes
	}
	return t.keys
}

// policySet is one policy's overrides as one instance holds them: never
// changed once published, so a check reads it without a lock. A change makes
// a new set that shares the large base and copies only the small delta of
// changes since the base was made; once the delta grows past deltaMax it is
// merged into a new base. A bulk load of n overrides thus costs O(n·√n)
// copying at most, never O(n²), and a lookup is two map reads per step.
type policySet struct {
	version string // the hash's version when this was read or last changed
	base    *table
	delta   *table
	lengths []int // every prefix length in base or delta, longest first
	n       int   // overrides in force

	sortOnce sync.Once
	sorted   []*entry // for listing, made on first use
}

func newPolicySet(version string, base *table) *policySet {
	ps := &policySet{version: version, base: base, delta: newTable(), n: len(base.keys) + len(base.prefixes)}
	ps.lengths = prefixLengths(base, ps.delta)
	return ps
}

// deltaMax is how many changes a set keeps beside its base before merging.
func deltaMax(n int) int { return max(64, n/64) }

// lookup finds the override of key: its own, else the longest prefix of it
// that has one; nil when none does.
func (ps *policySet) lookup(key string) *entry {
	if e, ok := ps.delta.keys[key]; ok {
		if e != nil {
			return e
		}
	} else if e := ps.base.keys[key]; e != nil {
		return e
	}
	for _, l := range ps.lengths {
		if l > len(key) {
			continue
		}
		p := key[:l]
		if e, ok := ps.delta.prefixes[p]; ok {
			if e != nil {
				return e
			}
			continue
		}
		if e := ps.base.prefixes[p]; e != nil {
			return e
		}
	}
	return nil
}

// get finds the override of exactly this key or prefix.
func (ps *policySet) get(prefix bool, s string) *entry {
	if e, ok := ps.delta.side(prefix)[s]; ok {
		return e
	}
	return ps.base.side(prefix)[s]
}

// with is ps changed by one override set (e) or removed (nil), at version.
func (ps *policySet) with(version string, prefix bool, s string, e *entry) *policySet {
	had := ps.get(prefix, s) != nil
	delta := &table{keys: ps.delta.keys, prefixes: ps.delta.prefixes}
	m := make(map[string]*entry, len(delta.side(prefix))+1)
	for k, v := range delta.side(prefix) {
		m[k] = v
	}
	m[s] = e
	if prefix {
		delta.prefixes = m
	} else {
		delta.keys = m
	}
	next := &policySet{version: version, base: ps.base, delta: delta, n: ps.n}
	switch {
	case had && e == nil:
		next.n--
	case !had && e != nil:
		next.n++
	}
	if len(delta.keys)+len(delta.prefixes) > deltaMax(next.n) {
		return newPolicySet(version, next.merged())
	}
	next.lengths = ps.lengths
	if prefix && !slices.Contains(next.lengths, len(s)) {
		next.lengths = prefixLengths(next.base, delta)
	}
	return next
}

// merged is the overrides in force as one table.
func (ps *policySet) merged() *table {
	t := &table{keys: make(map[string]*entry, len(ps.base.keys)), prefixes: make(map[string]*entry, len(ps.base.prefixes))}
	for _, side := range []bool{false, true} {
		dst := t.side(side)
		for k, e := range ps.base.side(side) {
			dst[k] = e
		}
		for k, e := range ps.delta.side(side) {
			if e == nil {
				delete(dst, k)
			} else {
				dst[k] = e
			}
		}
	}
	return t
}

// list is every override in force, keys first, then prefixes, each sorted:
// the order the API pages through.
func (ps *policySet) list() []*entry {
	ps.sortOnce.Do(func() {
		t := ps.merged()
		out := make([]*entry, 0, ps.n)
		for _, side := range []bool{false, true} {
			start := len(out)
			for _, e := range t.side(side) {
				out = append(out, e)
			}
			slices.SortFunc(out[start:], func(a, b *entry) int { return cmp.Compare(a.o.subject(), b.o.subject()) })
		}
		ps.sorted = out
	})
	return ps.sorted
}

// prefixLengths lists the distinct lengths of the prefixes in ts, longest
// first: a key is looked up once per length, at most limiter.MaxKeyLen.
func prefixLengths(ts ...*table) []int {
	var seen [256]bool
	var out []int
	for _, t := range ts {
		for p := range t.prefixes {
			if !seen[len(p)] {
				seen[len(p)] = true
				out = append(out, len(p))
			}
		}
	}
	slices.SortFunc(out, func(a, b int) int { return cmp.Compare(b, a) })
	return out
}
