package limiter_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestEmbeddedMatchesRealRedis runs one sequence of checks, snapshots and
// resets on the embedded Redis and on a real redis-server and requires the
// same answers. It walks every decision path — cost, several rules, the
// window's boundary, bounded eviction, retry times (and waiting them out),
// Window snapshots (truncated too), reset, expiry — because it is what
// justifies running the other limiter and server tests on the embedded Redis
// when no redis-server is installed, and the demo on it.
//
// Times differ between runs, so each is written relative to an instant of its
// own run: t0 (Redis's clock when the scenario began, for seeded entries) or
// n1, n2 … (the NowMs of the scenario's allowed checks, in order).
func TestEmbeddedMatchesRealRedis(t *testing.T) {
	real := redistest.RealURL(t)
	embedded := redistest.EmbeddedURL(t)
	onEmbedded, onReal := paritySequence(t, embedded), paritySequence(t, real)
	if slices.Equal(onEmbedded, onReal) {
		t.Logf("%d steps alike", len(onReal))
		return
	}
	for i := range max(len(onEmbedded), len(onReal)) {
		if e, r := line(onEmbedded, i), line(onReal, i); e != r {
			t.Errorf("step %d:\nembedded %s\nreal     %s", i, e, r)
		}
	}
}

func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(missing)"
}

func paritySequence(t *testing.T, url string) []string {
	h := &parity{t: t, c: newClient(t, url)}
	h.lim = limiter.New(h.c)

	demo := h.scenario("denials leave no entry; retry waits for the oldest", "demo=5/10s")
	for range 7 {
		h.allow(demo, 1)
	}
	h.say("entries %d, PTTL within the window %v", len(h.members(demo)), h.ttlWithin(demo, 10*time.Second))

	bulk := h.scenario("cost: denied when it does not fit, retry waits for the k-th oldest", "bulk=5/10s")
	h.seed(bulk, -4000, -3000, -2000, -1000)
	h.allow(bulk, 3)
	h.allow(bulk, 1)
	h.say("entries %d", len(h.members(bulk)))

	h.scenario("cost: one score, members id, id:1 … id:n-1", "bulk=5/10s")
	d := h.allow(bulk, 3)
	var got []string
	sameScore := true
	for _, z := range h.members(bulk) {
		got = append(got, strings.Replace(z.Member.(string), d.ID, "id", 1))
		sameScore = sameScore && int64(z.Score) == d.NowMs
	}
	slices.Sort(got)
	h.say("members %v, all scored now %v", got, sameScore)

	login := h.scenario("multi-rule: the short rule binds", "login=3/1s,5/1m")
	h.seed(login, -500, -400, -300)
	h.allow(login, 1)
	h.scenario("multi-rule: both violated, the longest retry wins", "login=3/1s,5/1m")
	h.seed(login, -30_000, -20_000, -300, -200, -100)
	h.allow(login, 1)
	h.scenario("multi-rule: allowed, the least remaining binds", "login=3/1s,5/1m")
	h.seed(login, -30_000, -20_000, -10_000)
	h.allow(login, 1)
	h.scenario("multi-rule: evicted only past the longest window", "login=3/1s,5/1m")
	h.seed(login, -120_000, -5_000)
	h.allow(login, 1)
	h.say("entries %d", len(h.members(login)))

	// One entry every millisecond across now - 10 s, so whatever the
	// script's now is, one sits exactly on the boundary: it is out.
	across := func(p limiter.Policy) []int64 {
		var offsets []int64
		for o := int64(-10_050); o <= -8_000; o++ {
			offsets = append(offsets, o)
		}
		h.seed(p, offsets...)
		return offsets
	}
	inside := func(d limiter.Decision, offsets []int64) int {
		cut := d.NowMs - 10_000
		if cut > h.t0-8_000 {
			h.t.Fatalf("the check ran %d ms after seeding; the scenario needs < 2000", d.NowMs-h.t0)
		}
		n := 0
		for _, o := range offsets {
			if h.t0+o > cut {
				n++
			}
		}
		return n
	}
	edge := h.scenario("boundary: an entry at exactly now - window is not counted", "edge=10000/10s,20000/1h")
	offsets := across(edge)
	d = h.check(edge, 1)
	h.say("allowed %v; 1h count %d; 10s count = entries after now-10s + 1: %v; oldest = now-10s+1: %v",
		d.Allowed, d.Rules[1].Count, d.Rules[0].Count == inside(d, offsets)+1, d.Rules[0].OldestMs == d.NowMs-10_000+1)
	edge = h.scenario("boundary: an entry at exactly now - window is evicted", "edge=10000/10s")
	offsets = across(edge)
	d = h.check(edge, 1)
	zs := h.members(edge)
	h.say("allowed %v; left = entries after now-10s + 1: %v; oldest left = now-10s+1: %v",
		d.Allowed, len(zs) == inside(d, offsets)+1, int64(zs[0].Score) == d.NowMs-10_000+1)

	big := h.scenario("eviction is bounded by MaxEvict per call", "big=5/1s")
	old := make([]int64, 2500)
	for i := range old {
		old[i] = -60_000 + int64(i)
	}
	h.seed(big, old...)
	for range 3 {
		h.allow(big, 1)
		h.say("entries %d", len(h.members(big)))
	}

	short := h.scenario("retry: waiting exactly RetryAfterMs is enough", "demo=3/2s")
	h.seed(short, -1500, -1000, -500)
	d = h.allow(short, 1)
	time.Sleep(time.Duration(d.RetryAfterMs) * time.Millisecond)
	// How many entries are left then depends on how long the sleep overran.
	h.say("after waiting RetryAfterMs: allowed %v", h.check(short, 1).Allowed)

	demo = h.scenario("window: a snapshot of the entries inside, consuming nothing", "demo=5/10s")
	h.seed(demo, -20_000, -10_001)
	for range 3 {
		h.allow(demo, 1)
	}
	before := h.members(demo)
	h.window(demo)
	h.say("the snapshot left the log alone: %v", slices.Equal(before, h.members(demo)))
	if err := h.lim.Reset(context.Background(), h.key, demo); err != nil {
		t.Fatal(err)
	}
	h.say("reset")
	h.window(demo)
	n, err := h.c.Exists(context.Background(), redisdata.LogKey(h.key, demo.Name)).Result()
	h.say("key exists after reset: %d %v", n, err)
	h.allow(demo, 5)
	h.allow(demo, 1)

	wide := h.scenario("window: truncated at MaxSnapshot, oldest first", "wide=100000/1h")
	many := make([]int64, limiter.MaxSnapshot+5)
	for i := range many {
		many[i] = -60_000 + int64(i)
	}
	h.seed(wide, many...)
	h.window(wide)
	return h.out
}

// parity runs one scenario after another on one Redis and writes down what
// happens, time-independently.
type parity struct {
	t       *testing.T
	c       *redis.Client
	lim     *limiter.Limiter
	out     []string
	key     string
	t0      int64   // Redis's clock when the scenario began
	anchors []int64 // NowMs of the scenario's allowed checks
	ids     []string
}

func (h *parity) say(format string, args ...any) {
	h.out = append(h.out, fmt.Sprintf(format, args...))
}

// scenario starts a scenario on a fresh key and returns its policy.
func (h *parity) scenario(name, policy string) limiter.Policy {
	h.key, h.t0, h.anchors, h.ids = uniqueKey(h.t), redisNow(h.t, h.c), nil, nil
	h.say("== %s (%s)", name, policy)
	return mustPolicy(h.t, policy)
}

// at writes a time: "none" for -1, the allowed check that recorded it (n1,
// n2 …), or its offset from t0 for seeded entries.
func (h *parity) at(ms int64) string {
	if ms == -1 {
		return "none"
	}
	if i := slices.Index(h.anchors, ms); i >= 0 {
		return fmt.Sprintf("n%d", i+1)
	}
	return fmt.Sprintf("t0%+d", ms-h.t0)
}

func (h *parity) seed(p limiter.Policy, offsets ...int64) {
	scores := make([]int64, len(offsets))
	for i, o := range offsets {
		scores[i] = h.t0 + o
	}
	seed(h.t, h.c, h.key, p, scores...)
}

func (h *parity) members(p limiter.Policy) []redis.Z { return members(h.t, h.c, h.key, p) }

func (h *parity) ttlWithin(p limiter.Policy, window time.Duration) bool {
	ttl, err := h.c.PTTL(context.Background(), redisdata.LogKey(h.key, p.Name)).Result()
	return err == nil && ttl > window-time.Second && ttl <= window
}

// check checks once, for a scenario that writes down what it needs.
func (h *parity) check(p limiter.Policy, cost int) limiter.Decision {
	d, err := h.lim.Allow(context.Background(), h.key, p, cost)
	if err != nil {
		h.t.Fatal(err)
	}
	if d.Allowed {
		h.anchors = append(h.anchors, d.NowMs)
		h.ids = append(h.ids, d.ID)
		// Each anchor its own millisecond: a fast Redis can run the next
		// allowed check in the same one, and its entries would be written
		// down as this check's.
		time.Sleep(2 * time.Millisecond)
	}
	return d
}

// allow checks once and writes the decision down. A retry is written as the
// entry whose leaving ends it: retry instant - the rule's window.
func (h *parity) allow(p limiter.Policy, cost int) limiter.Decision {
	d := h.check(p, cost)
	s := fmt.Sprintf("allow cost=%d: allowed=%v binding=%d id=%v", cost, d.Allowed, d.Binding, d.ID != "")
	if d.RetryAfterMs > 0 {
		s += " retry=" + h.at(d.NowMs+d.RetryAfterMs-d.Bound().WindowMs) + "+window"
	}
	for _, r := range d.Rules {
		s += fmt.Sprintf(" [%d/%d left=%d oldest=%s violated=%v", r.Count, r.Limit, r.Remaining, h.at(r.OldestMs), r.Violated)
		if r.Violated {
			s += " retry=" + h.at(d.NowMs+r.RetryMs-r.WindowMs) + "+window"
		}
		s += "]"
	}
	h.say("%s", s)
	return d
}

// window takes a snapshot and writes it down, entries by the check that
// recorded them (id1@n1: the first allowed check's, scored at its NowMs) or
// their seeded time.
func (h *parity) window(p limiter.Policy) {
	w, err := h.lim.Window(context.Background(), h.key, p)
	if err != nil {
		h.t.Fatal(err)
	}
	// Entries of one millisecond are in member order, and members are random:
	// the same snapshot is written the same way with those sorted by label.
	type entry struct {
		ms    int64
		label string
	}
	all := make([]entry, len(w.Entries))
	oldestFirst := true
	for i, e := range w.Entries {
		all[i] = entry{e.Ms, "seeded@" + h.at(e.Ms)}
		if j := slices.Index(h.ids, e.ID); j >= 0 {
			all[i].label = fmt.Sprintf("id%d@n%d", j+1, j+1)
			if e.Ms != h.anchors[j] {
				all[i].label = fmt.Sprintf("id%d@%s(not its check's NowMs)", j+1, h.at(e.Ms))
			}
		}
		oldestFirst = oldestFirst && (i == 0 || e.Ms >= w.Entries[i-1].Ms)
	}
	slices.SortStableFunc(all, func(a, b entry) int { return cmp.Or(cmp.Compare(a.ms, b.ms), cmp.Compare(a.label, b.label)) })
	var entries []string
	for i, e := range all {
		if i < 3 || i >= len(all)-2 {
			entries = append(entries, e.label)
		} else if i == 3 {
			entries = append(entries, "…")
		}
	}
	var rules []string
	for _, r := range w.Rules {
		rules = append(rules, fmt.Sprintf("%d oldest=%s", r.Count, h.at(r.OldestMs)))
	}
	h.say("window: count=%d limit=%d windowMs=%d truncated=%v %d entries %v oldest first %v rules %v now>=last check %v",
		w.Count, w.Limit, w.WindowMs, w.Truncated, len(w.Entries), entries, oldestFirst, rules,
		len(h.anchors) == 0 || w.NowMs >= h.anchors[len(h.anchors)-1])
}

// TestEmbeddedRunsEveryAlgorithm: `go run .` decides on the embedded Redis, so
// every algorithm's script must run there as on a real redis-server. One
// sequence of checks, snapshots and resets on fresh keys gives the same
// answers on both, and on the embedded server the random seeded states of
// TestAlgorithmsMatchTheirDefinition match the definition, exact retry times
// included.
func TestEmbeddedRunsEveryAlgorithm(t *testing.T) {
	real := redistest.RealURL(t)
	emb := redistest.EmbeddedURL(t)

	run := func(t *testing.T, url string, alg limiter.Algorithm) []string {
		c := newClient(t, url)
		lim := limiter.New(c)
		ctx := context.Background()
		// Hour windows: far from an edge of Redis time, both runs see one
		// window whatever the millisecond they start at.
		awayFromBoundary(t, c, 2*3_600_000, 5*time.Second)
		key := uniqueKey(t)
		multi := mustPolicy(t, "login=3/1h,5/2h@"+string(alg))
		single := mustPolicy(t, "one=4/1h@"+string(alg))
		var out []string
		check := func(p limiter.Policy, cost int) {
			d, err := lim.Allow(ctx, key, p, cost)
			if err != nil {
				t.Fatal(err)
			}
			s := fmt.Sprintf("%s cost=%d allowed=%v binding=%d retry>0=%v id=%v", p.Name, cost, d.Allowed, d.Binding, d.RetryAfterMs > 0, d.ID != "")
			for _, r := range d.Rules {
				s += fmt.Sprintf(" [%d/%d rem=%d violated=%v reset>0=%v]", r.Count, r.Limit, r.Remaining, r.Violated, r.ResetMs > 0)
			}
			out = append(out, s)
		}
		window := func(p limiter.Policy) {
			w, err := lim.Window(ctx, key, p)
			if err != nil {
				t.Fatal(err)
			}
			s := fmt.Sprintf("window %s %s count=%d limit=%d windowMs=%d", p.Name, w.Algorithm, w.Count, w.Limit, w.WindowMs)
			for _, r := range w.Rules {
				s += fmt.Sprintf(" [%d rem=%d state=%T]", r.Count, r.Remaining, r.State)
			}
			out = append(out, s)
		}
		for range 6 {
			check(single, 1)
		}
		window(single)
		for _, cost := range []int{2, 2, 1, 1, 3} {
			check(multi, cost)
		}
		window(multi)
		if err := lim.Reset(ctx, key, single); err != nil {
			t.Fatal(err)
		}
		window(single)
		check(single, 4)
		check(single, 1)
		return out
	}
	for _, alg := range stateAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			embedded, onReal := run(t, emb, alg), run(t, real, alg)
			if !slices.Equal(embedded, onReal) {
				for i := range onReal {
					if embedded[i] != onReal[i] {
						t.Errorf("step %d:\nembedded %s\nreal     %s", i, embedded[i], onReal[i])
					}
				}
			}
			c := newClient(t, emb)
			matchDefinition(t, c, limiter.New(c), alg, 60)
		})
	}
}
