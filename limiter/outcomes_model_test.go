package limiter_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// logModel is the sliding-window log as the contract defines it, with
// checks, refunds and settles: each allowed check a group of entries at one
// score, under its id.
type logModel struct {
	p      limiter.Policy
	groups map[string]*group // by id
}

type group struct {
	ms   int64
	n    int
	debt bool // a settle grew it
}

// inside are the scores of the entries inside w at now, oldest first.
func (m *logModel) inside(w, now int64) []int64 {
	var s []int64
	for _, g := range m.groups {
		if g.ms > now-w {
			for range g.n {
				s = append(s, g.ms)
			}
		}
	}
	slices.Sort(s)
	return s
}

// check decides a request of cost at now: allowed, and the exact retry.
func (m *logModel) check(id string, cost int, now int64) (bool, int64) {
	allowed, retry := true, int64(0)
	for _, r := range m.p.Rules {
		in := m.inside(r.WindowMs(), now)
		if len(in)+cost > r.Limit {
			allowed = false
			k := len(in) + cost - r.Limit
			retry = max(retry, in[k-1]+r.WindowMs()-now)
		}
	}
	if allowed {
		m.groups[id] = &group{ms: now, n: cost}
	}
	return allowed, retry
}

// found is id's group while it is inside the longest window.
func (m *logModel) found(id string, now int64) *group {
	g := m.groups[id]
	if g == nil || g.n == 0 || g.ms <= now-m.p.Longest().Milliseconds() {
		return nil
	}
	return g
}

// TestOutcomesAgainstTheModel: random sequences of checks, refunds, settles
// and waits on several keys of a two-rule policy. After every step each
// answer — allowed or not, the exact retry, what a refund or settle found
// and left — is the model's, every rule's count is the model's, and no
// window holds more than its limit unless a settle put a debt there.
func TestOutcomesAgainstTheModel(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := direct(c)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	p := mustPolicy(t, "model=3/1s,5/3s")
	keys := []string{uniqueKey(t), uniqueKey(t), uniqueKey(t)}
	models := map[string]*logModel{}
	ids := map[string][]string{}
	for _, k := range keys {
		models[k] = &logModel{p: p, groups: map[string]*group{}}
	}
	ctx := context.Background()
	for step := range 300 {
		key := keys[rng.IntN(len(keys))]
		m := models[key]
		var now int64
		switch op := rng.IntN(10); {
		case op < 5: // check
			cost := 1 + rng.IntN(3)
			d := allow(t, lim, key, p, cost)
			now = d.NowMs
			allowed, retry := m.check(d.ID, cost, now)
			if d.Allowed != allowed || d.RetryAfterMs != retry {
				t.Fatalf("step %d, check of cost %d at %d: %+v; the model: allowed %v, retry %d", step, cost, now, d, allowed, retry)
			}
			if d.Allowed {
				ids[key] = append(ids[key], d.ID)
			}
		case op < 7 && len(ids[key]) > 0: // refund
			id := ids[key][rng.IntN(len(ids[key]))]
			a, err := lim.Refund(ctx, key, p, id)
			if err != nil {
				t.Fatal(err)
			}
			now = a.NowMs
			want := 0
			if g := m.found(id, now); g != nil {
				want, g.n = g.n, 0
			}
			if a.Was != want || a.Now != 0 {
				t.Fatalf("step %d, refund of %s at %d: %+v; the model found %d", step, id, now, a, want)
			}
		case op < 9 && len(ids[key]) > 0: // settle
			id := ids[key][rng.IntN(len(ids[key]))]
			cost := rng.IntN(p.MaxCost() + 1)
			a, err := lim.Settle(ctx, key, p, id, cost)
			if err != nil {
				t.Fatal(err)
			}
			now = a.NowMs
			was, after := 0, 0
			if g := m.found(id, now); g != nil {
				was, after = g.n, cost
				g.debt = g.debt || cost > g.n
				g.n = cost
			}
			if a.Was != was || a.Now != after {
				t.Fatalf("step %d, settle of %s to %d at %d: %+v; the model: was %d, now %d", step, id, cost, now, a, was, after)
			}
		default: // wait
			time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
			continue
		}
		w, err := lim.Window(ctx, key, p)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range p.Rules {
			in := m.inside(r.WindowMs(), w.NowMs)
			if w.Rules[i].Count != len(in) {
				t.Fatalf("step %d: rule %d/%s holds %d entries at %d; the model %d", step, r.Limit, r.Window, w.Rules[i].Count, w.NowMs, len(in))
			}
			if len(in) > r.Limit && !m.debtInside(r.WindowMs(), w.NowMs) {
				t.Fatalf("step %d: rule %d/%s holds %d entries, no settle's debt among them", step, r.Limit, r.Window, len(in))
			}
		}
	}
}

// debtInside reports whether a group a settle grew lies inside w at now.
func (m *logModel) debtInside(w, now int64) bool {
	for _, g := range m.groups {
		if g.debt && g.n > 0 && g.ms > now-w {
			return true
		}
	}
	return false
}
