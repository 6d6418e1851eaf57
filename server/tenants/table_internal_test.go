package tenants

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// model is what a policy's set must answer: the most specific override
// found by brute force.
type model struct {
	keys, prefixes map[string]*entry
}

func (m model) lookup(key string) *entry {
	if e := m.keys[key]; e != nil {
		return e
	}
	var best *entry
	for p, e := range m.prefixes {
		if strings.HasPrefix(key, p) && (best == nil || len(p) > len(best.o.Prefix)) {
			best = e
		}
	}
	return best
}

// TestPolicySetMatchesModel: through thousands of random sets and removals
// of keys and prefixes — enough to merge the delta into the base many times
// — every lookup finds what brute force finds (a key's own, else its longest
// prefix), counts stay right, and a set once published never changes.
func TestPolicySetMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := "ab:"
	word := func() string {
		b := make([]byte, 1+r.IntN(5))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	m := model{keys: map[string]*entry{}, prefixes: map[string]*entry{}}
	ps := newPolicySet("", newTable())
	var kept []*policySet
	var keptAnswers []map[string]*entry
	probes := make([]string, 200)
	for i := range probes {
		probes[i] = word() + word()
	}
	for step := range 6000 {
		prefix := r.IntN(2) == 0
		s := word()
		var e *entry
		if r.IntN(3) > 0 {
			o := Override{Policy: "p", Rules: []string{"1/1s"}}
			if prefix {
				o.Prefix = s
			} else {
				o.Key = s
			}
			e = &entry{o: o}
		}
		side := m.keys
		if prefix {
			side = m.prefixes
		}
		if e == nil {
			delete(side, s)
		} else {
			side[s] = e
		}
		ps = ps.with("v", prefix, s, e)
		if ps.n != len(m.keys)+len(m.prefixes) {
			t.Fatalf("step %d: n = %d, want %d", step, ps.n, len(m.keys)+len(m.prefixes))
		}
		for _, k := range probes {
			if got, want := ps.lookup(k), m.lookup(k); got != want {
				t.Fatalf("step %d: lookup(%q) = %v, want %v", step, k, got, want)
			}
		}
		if step%500 == 0 {
			answers := map[string]*entry{}
			for _, k := range probes {
				answers[k] = ps.lookup(k)
			}
			kept, keptAnswers = append(kept, ps), append(keptAnswers, answers)
		}
	}
	for i, old := range kept {
		for k, want := range keptAnswers[i] {
			if got := old.lookup(k); got != want {
				t.Fatalf("a published set changed: lookup(%q) = %v, want %v", k, got, want)
			}
		}
	}
	// Listing: keys first, then prefixes, each sorted, every one once.
	list := ps.list()
	if len(list) != ps.n {
		t.Fatalf("list has %d, want %d", len(list), ps.n)
	}
	for i := 1; i < len(list); i++ {
		if list[i-1].o.subject() >= list[i].o.subject() {
			t.Fatalf("list out of order at %d: %q then %q", i, list[i-1].o.subject(), list[i].o.subject())
		}
	}
}
