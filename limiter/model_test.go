package limiter_test

// A model of each algorithm's definition (SPEC §8), written for the tests
// from the definition rather than from the scripts: it answers "does a
// request of cost c fit at ms t?" and nothing more. The oracles below find
// retry and reset times by trying every millisecond, so they share no
// closed-form arithmetic with the Lua they check.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
)

// ruleModel is one rule's state as a test seeded it.
type ruleModel interface {
	// fits reports whether cost more fit at t (ms on Redis's clock).
	fits(t, cost int64) bool
	// take records an allowed request of cost at t.
	take(t, cost int64)
	// stored is the hash field value the algorithm's script keeps.
	stored() string
	limit() int64
	window() int64
}

func floorDiv(x, d int64) int64 {
	q := x / d
	if (x%d != 0) && ((x < 0) != (d < 0)) {
		q--
	}
	return q
}

func align(t, w int64) int64 { return floorDiv(t, w) * w }

type fixedModel struct{ l, w, start, count int64 }

func (m *fixedModel) now(t int64) int64 {
	if align(t, m.w) == m.start {
		return m.count
	}
	return 0
}
func (m *fixedModel) fits(t, c int64) bool { return m.now(t)+c <= m.l }
func (m *fixedModel) take(t, c int64)      { m.count, m.start = m.now(t)+c, align(t, m.w) }
func (m *fixedModel) stored() string       { return fmt.Sprintf("%d:%d", m.start, m.count) }
func (m *fixedModel) limit() int64         { return m.l }
func (m *fixedModel) window() int64        { return m.w }

type counterModel struct{ l, w, start, prev, curr int64 }

// at gives the previous and current counts of the window holding t.
func (m *counterModel) at(t int64) (prev, curr int64) {
	switch align(t, m.w) {
	case m.start:
		return m.prev, m.curr
	case m.start + m.w:
		return m.curr, 0
	}
	return 0, 0
}

// fits: prev × (w − elapsed)/w + curr + c ≤ l, multiplied out by w.
func (m *counterModel) fits(t, c int64) bool {
	prev, curr := m.at(t)
	elapsed := t - align(t, m.w)
	return prev*(m.w-elapsed)+(curr+c)*m.w <= m.l*m.w
}
func (m *counterModel) take(t, c int64) {
	prev, curr := m.at(t)
	m.start, m.prev, m.curr = align(t, m.w), prev, curr+c
}
func (m *counterModel) stored() string { return fmt.Sprintf("%d:%d:%d", m.start, m.prev, m.curr) }
func (m *counterModel) limit() int64   { return m.l }
func (m *counterModel) window() int64  { return m.w }

// gcraModel keeps the TAT in units of 1/l ms: tat = TAT × l.
type gcraModel struct{ l, w, tat int64 }

// fits: max(TAT, t) + c × w/l − t ≤ w, multiplied out by l.
func (m *gcraModel) fits(t, c int64) bool { return max(m.tat, t*m.l)+c*m.w-t*m.l <= m.w*m.l }
func (m *gcraModel) take(t, c int64)      { m.tat = max(m.tat, t*m.l) + c*m.w }
func (m *gcraModel) stored() string {
	return fmt.Sprintf("%d:%d:%d", floorDiv(m.tat, m.l), m.tat-floorDiv(m.tat, m.l)*m.l, m.l)
}
func (m *gcraModel) limit() int64  { return m.l }
func (m *gcraModel) window() int64 { return m.w }

// bucketModel keeps tokens in units of 1/w: units = tokens × w, refilled by
// l every ms, capacity l × w.
type bucketModel struct{ l, w, units, last int64 }

func (m *bucketModel) at(t int64) int64 {
	return min(m.l*m.w, m.units+m.l*max(0, t-m.last))
}
func (m *bucketModel) fits(t, c int64) bool { return m.at(t) >= c*m.w }
func (m *bucketModel) take(t, c int64)      { m.units, m.last = m.at(t)-c*m.w, t }
func (m *bucketModel) stored() string       { return fmt.Sprintf("%d:%d", m.units, m.last) }
func (m *bucketModel) limit() int64         { return m.l }
func (m *bucketModel) window() int64        { return m.w }

// policyModel is a policy's rules, all of which must fit.
type policyModel []ruleModel

func (pm policyModel) fits(t, c int64) bool {
	for _, r := range pm {
		if !r.fits(t, c) {
			return false
		}
	}
	return true
}

// firstFit is the first ms from t on at which cost fits every rule, found by
// trying each one.
func (pm policyModel) firstFit(t, cost int64) int64 {
	horizon := t + 10_000 // the farthest a ladder's rung is seeded
	for _, r := range pm {
		horizon = max(horizon, t+3*r.window())
	}
	for u := t; u <= horizon; u++ {
		if pm.fits(u, cost) {
			return u
		}
	}
	panic(fmt.Sprintf("nothing fits within %d ms", horizon-t))
}

// remaining is the most requests of cost 1 a rule would take at t (at most
// its limit): the largest n that fits.
func remaining(r ruleModel, t int64) int64 {
	n := int64(0)
	for n < r.limit() && r.fits(t, n+1) {
		n++
	}
	return n
}

// resetAfter is how long from t until the rule has full room again.
func resetAfter(r ruleModel, t int64) int64 {
	for u := t; u <= t+3*r.window(); u++ {
		if r.fits(u, r.limit()) {
			return u - t
		}
	}
	panic("never full again")
}

// algorithmModel is how the tests model one algorithm that keeps a state.
// An algorithm's test file registers its own in models (from an init), so a
// new algorithm brings its model in its own files.
type algorithmModel struct {
	// empty is a rule with nothing recorded.
	empty func(l, w int64) ruleModel
	// random is a rule in a random but possible state relative to t0
	// (Redis's clock when seeding), rng-chosen.
	random func(l, w, t0 int64, rng *rand.Rand) ruleModel
}

// models holds every state algorithm's model.
var models = map[limiter.Algorithm]algorithmModel{
	limiter.Fixed: {
		empty: func(l, w int64) ruleModel { return &fixedModel{l: l, w: w, start: -w} },
		random: func(l, w, t0 int64, rng *rand.Rand) ruleModel {
			return &fixedModel{l: l, w: w, start: align(t0, w) - w*rng.Int64N(2), count: rng.Int64N(l + 1)}
		},
	},
	limiter.Counter: {
		empty: func(l, w int64) ruleModel { return &counterModel{l: l, w: w, start: -3 * w} },
		random: func(l, w, t0 int64, rng *rand.Rand) ruleModel {
			return &counterModel{l: l, w: w, start: align(t0, w) - w*rng.Int64N(3), prev: rng.Int64N(l + 1), curr: rng.Int64N(l + 1)}
		},
	},
	limiter.GCRA: {
		empty: func(l, w int64) ruleModel { return &gcraModel{l: l, w: w} },
		random: func(l, w, t0 int64, rng *rand.Rand) ruleModel {
			// A TAT from half a window ago to a whole window ahead.
			return &gcraModel{l: l, w: w, tat: t0*l - w*l/2 + rng.Int64N(w*l*3/2+1)}
		},
	},
	limiter.Bucket: {
		empty: func(l, w int64) ruleModel { return &bucketModel{l: l, w: w, units: l * w} },
		random: func(l, w, t0 int64, rng *rand.Rand) ruleModel {
			return &bucketModel{l: l, w: w, units: rng.Int64N(l*w + 1), last: t0 - rng.Int64N(2*w)}
		},
	},
}

// modelFor is alg's model; an algorithm without one fails the tests that
// need it, by name.
func modelFor(alg limiter.Algorithm) algorithmModel {
	m, ok := models[alg]
	if !ok {
		panic("no test model for the algorithm " + string(alg) + ": register one in models from its own _test.go")
	}
	return m
}

// randomModel is a rule of the named algorithm in a random but possible
// state relative to t0 (Redis's clock when seeding), rng-chosen.
func randomModel(alg limiter.Algorithm, l, w, t0 int64, rng *rand.Rand) ruleModel {
	return modelFor(alg).random(l, w, t0, rng)
}

// emptyModel is a rule of the named algorithm with nothing recorded.
func emptyModel(alg limiter.Algorithm, l, w int64) ruleModel { return modelFor(alg).empty(l, w) }

// modelOf is p's rules with nothing recorded.
func modelOf(p limiter.Policy) policyModel {
	pm := make(policyModel, len(p.Rules))
	for i, r := range p.Rules {
		pm[i] = emptyModel(p.Algorithm, int64(r.Limit), r.WindowMs())
	}
	return pm
}

// seedModel writes pm's state for key under p, as earlier requests would have.
func seedModel(t testing.TB, c redis.UniversalClient, key string, p limiter.Policy, pm policyModel) {
	t.Helper()
	var fv []any
	for _, r := range pm {
		fv = append(fv, strconv.FormatInt(r.window(), 10), r.stored())
	}
	if err := c.HSet(context.Background(), stateKey(key, p), fv...).Err(); err != nil {
		t.Fatal(err)
	}
}

// seedMany seeds one fresh key per model in one round trip and returns the
// keys in the models' order.
func seedMany(t testing.TB, c redis.UniversalClient, p limiter.Policy, pms []policyModel) []string {
	t.Helper()
	keys := make([]string, len(pms))
	pipe := c.Pipeline()
	for i, pm := range pms {
		keys[i] = uniqueKey(t)
		var fv []any
		for _, r := range pm {
			fv = append(fv, strconv.FormatInt(r.window(), 10), r.stored())
		}
		pipe.HSet(context.Background(), stateKey(keys[i], p), fv...)
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	return keys
}

// stateOf is the raw hash of key under p.
func stateOf(t testing.TB, c redis.UniversalClient, key string, p limiter.Policy) map[string]string {
	t.Helper()
	m, err := c.HGetAll(context.Background(), stateKey(key, p)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// stateAlgorithms are the algorithms that keep per-rule state in a hash.
var stateAlgorithms = []limiter.Algorithm{limiter.Fixed, limiter.Counter, limiter.GCRA, limiter.Bucket}
