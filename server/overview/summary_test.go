package overview

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/ratescope/ratescope/limiter"
)

// tally is a key's exact checks and denials in a stream.
type tally struct{ checks, denied int64 }

// stream is a test's traffic: a few heavy keys, each a known share, among
// many light ones, in random order.
type stream struct {
	keys   []string
	denied []bool
	exact  map[string]tally
	total  int64
}

// heavyStream has heavy[i] checks of "heavy-i" (the first deniedOf[i] of
// them denied) and light checks spread over lightKeys keys, shuffled.
func heavyStream(seed uint64, heavy, deniedOf []int, light, lightKeys int) *stream {
	s := &stream{exact: map[string]tally{}}
	add := func(k string, d bool) {
		s.keys = append(s.keys, k)
		s.denied = append(s.denied, d)
		t := s.exact[k]
		t.checks++
		if d {
			t.denied++
		}
		s.exact[k] = t
		s.total++
	}
	for i, n := range heavy {
		for j := range n {
			add(fmt.Sprintf("heavy-%d", i), j < deniedOf[i])
		}
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for range light {
		add(fmt.Sprintf("light-%d", r.IntN(lightKeys)), false)
	}
	r.Shuffle(len(s.keys), func(i, j int) {
		s.keys[i], s.keys[j] = s.keys[j], s.keys[i]
		s.denied[i], s.denied[j] = s.denied[j], s.denied[i]
	})
	return s
}

// TestSummaryBoundsItsError: a Space-Saving summary holds every key of more
// than n/k additions, overestimating each count by at most n/k.
func TestSummaryBoundsItsError(t *testing.T) {
	s := heavyStream(1, []int{3000, 2000, 1000, 400}, []int{0, 0, 0, 0}, 20000, 5000)
	sum := newSummary(64)
	for i, k := range s.keys {
		sum.add(k, s.denied[i])
	}
	if sum.len() != 64 || sum.total != s.total {
		t.Fatalf("counters %d total %d, want 64 and %d", sum.len(), sum.total, s.total)
	}
	bound := s.total / 64
	held := map[string]int64{}
	for _, c := range sum.counters {
		held[c.key] = c.count
		if exact := s.exact[c.key].checks; c.count < exact || c.count > exact+bound {
			t.Errorf("%s counted %d, exact %d: want within [exact, exact+%d]", c.key, c.count, exact, bound)
		}
	}
	for k, e := range s.exact {
		if _, ok := held[k]; e.checks > bound && !ok {
			t.Errorf("%s (%d > n/k = %d) holds no counter", k, e.checks, bound)
		}
	}
}

// TestTopListsHeavyKeysFirst: the top lists name the heavy keys first, in
// order, their checks and denials within 1 % of the policy's checks, though
// the light keys outnumber the counters many times over.
func TestTopListsHeavyKeysFirst(t *testing.T) {
	s := heavyStream(2, []int{4000, 3000, 2000, 1200}, []int{500, 2500, 0, 1000}, 30000, 3000)
	c := newCollector(Counters)
	c.Track([]string{"api"})
	nowMs := int64(1_800_000_000_000)
	for i, k := range s.keys {
		// Spread over the minute's buckets.
		ms := nowMs - int64(len(s.keys)-i)*50_000/int64(len(s.keys))
		c.Decided(limiter.Decision{Key: k, Policy: "api", Allowed: !s.denied[i], NowMs: ms})
	}
	m := c.policy("api").minute(nowMs)
	if m.total != s.total {
		t.Fatalf("minute holds %d checks, want %d", m.total, s.total)
	}
	top := m.top()
	checkRows(t, "checks", top.Checks, []string{"heavy-0", "heavy-1", "heavy-2", "heavy-3"}, s)
	checkRows(t, "denied", top.Denied, []string{"heavy-1", "heavy-3", "heavy-0"}, s)
	if len(top.Checks) != TopRows {
		t.Errorf("%d rows by checks, want %d", len(top.Checks), TopRows)
	}
}

// checkRows: rows start with want, in order, each count within 1 % of the
// stream's total.
func checkRows(t *testing.T, list string, rows []Row, want []string, s *stream) {
	t.Helper()
	if len(rows) < len(want) {
		t.Fatalf("%s: %d rows, want at least %d: %v", list, len(rows), len(want), rows)
	}
	tol := s.total / 100
	for i, k := range want {
		r := rows[i]
		e := s.exact[k]
		if r.Key != k {
			t.Errorf("%s row %d is %s, want %s (rows %v)", list, i, r.Key, k, rows[:len(want)])
			continue
		}
		if abs(r.Checks-e.checks) > tol || abs(r.Denied-e.denied) > tol {
			t.Errorf("%s row %s: checks %d denied %d, exact %d and %d (±%d)", list, k, r.Checks, r.Denied, e.checks, e.denied, tol)
		}
	}
}

func abs(n int64) int64 { return max(n, -n) }

// TestEveryHeavyKeyListed: beyond the first TopRows, every key of at least
// 1 % of the checks is listed.
func TestEveryHeavyKeyListed(t *testing.T) {
	heavy := make([]int, 30)
	for i := range heavy {
		heavy[i] = 200 + i // 30 keys of about 1.5 % each
	}
	s := heavyStream(3, heavy, make([]int, 30), 4000, 2000)
	c := newCollector(Counters)
	c.Track([]string{"api"})
	for i, k := range s.keys {
		c.Decided(limiter.Decision{Key: k, Policy: "api", Allowed: !s.denied[i], NowMs: 1_800_000_000_000})
	}
	rows := c.policy("api").minute(1_800_000_000_000).top().Checks
	if len(rows) != 30 {
		t.Fatalf("%d rows, want the 30 keys of over 1 %%", len(rows))
	}
}

// TestMergedInstances: two instances' minutes, one as sent over the wire,
// give the same top lists as one instance that saw everything, within 1 %.
func TestMergedInstances(t *testing.T) {
	s := heavyStream(4, []int{5000, 3000, 1500}, []int{4000, 0, 1400}, 40000, 4000)
	a, b := newCollector(Counters), newCollector(Counters)
	a.Track([]string{"api"})
	b.Track([]string{"api"})
	nowMs := int64(1_800_000_000_000)
	for i, k := range s.keys {
		on := a
		if i%2 == 1 {
			on = b
		}
		on.Decided(limiter.Decision{Key: k, Policy: "api", Allowed: !s.denied[i], NowMs: nowMs})
	}
	m := a.policy("api").minute(nowMs)
	m.merge(b.policy("api").minute(nowMs).wire())
	if m.total != s.total {
		t.Fatalf("merged minute holds %d checks, want %d", m.total, s.total)
	}
	top := m.top()
	checkRows(t, "checks", top.Checks, []string{"heavy-0", "heavy-1", "heavy-2"}, s)
	checkRows(t, "denied", top.Denied, []string{"heavy-0", "heavy-2"}, s)
}

// TestShadowWouldDenials: a shadow policy's would-denials make its denied
// list and its shadowDenied rate; its denied rate stays 0.
func TestShadowWouldDenials(t *testing.T) {
	c := newCollector(Counters)
	c.Track([]string{"search"})
	nowMs := int64(1_800_000_000_500)
	for i := range 50 {
		c.Decided(limiter.Decision{Key: "crawler", Policy: "search", Shadow: true, Allowed: i < 10, NowMs: nowMs})
		c.Decided(limiter.Decision{Key: fmt.Sprintf("user-%d", i), Policy: "search", Shadow: true, Allowed: true, NowMs: nowMs})
	}
	pc := c.policy("search")
	top := pc.minute(nowMs).top()
	if len(top.Denied) != 1 || top.Denied[0] != (Row{Key: "crawler", Checks: 50, Denied: 40}) {
		t.Fatalf("denied list %v, want crawler with 50 checks, 40 would-denied", top.Denied)
	}
	r := pc.series(nowMs/1000, 1)
	if r.Allowed[0] != 60 || r.ShadowDenied[0] != 40 || r.Denied[0] != 0 {
		t.Fatalf("rates %+v, want 60 allowed, 40 shadow-denied, 0 denied", r)
	}
}

// TestBucketsSlide: checks older than the minute leave the top lists, and
// seconds older than Seconds leave the rates.
func TestBucketsSlide(t *testing.T) {
	c := newCollector(Counters)
	c.Track([]string{"api"})
	t0 := int64(1_800_000_000_000)
	c.Decided(limiter.Decision{Key: "old", Policy: "api", Allowed: true, NowMs: t0})
	c.Decided(limiter.Decision{Key: "cached", Policy: "api", Cached: true, NowMs: t0})
	pc := c.policy("api")
	if top := pc.minute(t0 + 5_000).top(); len(top.Checks) != 2 {
		t.Fatalf("within the minute: %v", top.Checks)
	}
	if r := pc.series(t0/1000, 1); r.Denied[0] != 1 || r.Cached[0] != 1 {
		t.Fatalf("a cached denial is a denial, and cached: %+v", r)
	}
	later := t0 + Buckets*BucketMs
	c.Decided(limiter.Decision{Key: "new", Policy: "api", Allowed: true, NowMs: later})
	top := pc.minute(later).top()
	if len(top.Checks) != 1 || top.Checks[0].Key != "new" {
		t.Fatalf("after a minute: %v, want only new", top.Checks)
	}
	r := pc.series(later/1000, Seconds)
	for i, n := range r.Allowed[:Seconds-1] {
		if n != 0 {
			t.Fatalf("second %d still counts %d", i, n)
		}
	}
}

// TestMemoryBoundedByCounters: a million distinct keys leave the summaries
// at their counters, and the heap where it was.
func TestMemoryBoundedByCounters(t *testing.T) {
	c := newCollector(Counters)
	c.Track([]string{"api"})
	pc := c.policy("api")
	nowMs := int64(1_800_000_000_000)
	feed := func(from, to int) {
		for i := from; i < to; i++ {
			// Ten seconds of Redis time for every 100,000 keys: every bucket fills.
			c.Decided(limiter.Decision{Key: "client-" + strconv.Itoa(i), Policy: "api", Allowed: i%3 != 0, NowMs: nowMs + int64(i)/10})
		}
	}
	feed(0, 100_000) // warm: every bucket's summaries at their size
	before := heapInUse()
	feed(100_000, 1_000_000)
	after := heapInUse()
	for i, b := range pc.buckets {
		if b.checks.len() > Counters || b.denials.len() > Counters || len(b.checks.index) > Counters || len(b.denials.index) > Counters {
			t.Errorf("bucket %d holds %d and %d counters, more than %d", i, b.checks.len(), b.denials.len(), Counters)
		}
	}
	// A million keys of ~14 bytes would be 14 MB and more; the counters, a
	// few hundred kB whatever the keys.
	if grown := int64(after) - int64(before); grown > 1<<20 {
		t.Errorf("the heap grew by %d bytes over 900,000 new keys", grown)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestDecidedAllocatesNothing: counting a check, a new key's included once
// the summaries are full, allocates nothing.
func TestDecidedAllocatesNothing(t *testing.T) {
	c := newCollector(Counters)
	c.Track([]string{"api"})
	keys := make([]string, 10*Counters)
	for i := range keys {
		keys[i] = fmt.Sprintf("k-%d", i)
	}
	nowMs := int64(1_800_000_000_000)
	for _, k := range keys {
		c.Decided(limiter.Decision{Key: k, Policy: "api", NowMs: nowMs})
	}
	i := 0
	allocs := testing.AllocsPerRun(10_000, func() {
		c.Decided(limiter.Decision{Key: keys[i%len(keys)], Policy: "api", Allowed: i%2 == 0, NowMs: nowMs})
		i++
	})
	if allocs > 0.01 {
		t.Fatalf("%.3f allocations per check", allocs)
	}
}

// BenchmarkDecided is the overview's cost on the check path, from every
// core at once.
func BenchmarkDecided(b *testing.B) {
	c := newCollector(Counters)
	c.Track([]string{"api", "login"})
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%d", i)
	}
	nowMs := int64(1_800_000_000_000)
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 2))
		for pb.Next() {
			k := keys[int(float64(len(keys))*r.Float64()*r.Float64())] // skewed
			c.Decided(limiter.Decision{Key: k, Policy: "api", Allowed: r.IntN(4) > 0, NowMs: nowMs})
		}
	})
}

func BenchmarkDecidedSerial(b *testing.B) {
	c := newCollector(Counters)
	c.Track([]string{"api"})
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%d", i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	idx := make([]int, 1<<16)
	for i := range idx {
		idx[i] = int(float64(len(keys)) * r.Float64() * r.Float64())
	}
	nowMs := int64(1_800_000_000_000)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c.Decided(limiter.Decision{Key: keys[idx[i&(1<<16-1)]], Policy: "api", Allowed: i%4 > 0, NowMs: nowMs})
	}
}

// TestOnePercentAlwaysListed: keys of 1 % of a policy's checks each, whose
// checks crowd into one bucket and trickle through the others (where the
// light keys push them out of the summaries), split over two instances, are
// all listed — more than TopRows of them — each counted within 1 %.
func TestOnePercentAlwaysListed(t *testing.T) {
	const heavy, perBucket = 30, 10_000
	a, b := newCollector(Counters), newCollector(Counters)
	a.Track([]string{"api"})
	b.Track([]string{"api"})
	r := rand.New(rand.NewPCG(5, 6))
	t0 := int64(1_800_000_000_000) / BucketMs * BucketMs
	exact := map[string]int64{}
	var total int64
	for bucket := range Buckets {
		var keys []string
		for i := range heavy {
			n := 30
			if i%Buckets == bucket {
				n = 450
			}
			for range n {
				keys = append(keys, fmt.Sprintf("heavy-%d", i))
			}
		}
		for len(keys) < perBucket {
			keys = append(keys, fmt.Sprintf("light-%d", r.IntN(100_000)))
		}
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for i, k := range keys {
			on := a
			if r.IntN(2) == 1 {
				on = b
			}
			on.Decided(limiter.Decision{Key: k, Policy: "api", Allowed: true, NowMs: t0 + int64(bucket*BucketMs+i*BucketMs/len(keys))})
			exact[k]++
			total++
		}
	}
	nowMs := t0 + Buckets*BucketMs - 1
	m := a.policy("api").minute(nowMs)
	m.merge(b.policy("api").minute(nowMs).wire())
	rows := m.top().Checks
	listed := map[string]int64{}
	for _, row := range rows {
		listed[row.Key] = row.Checks
	}
	for i := range heavy {
		k := fmt.Sprintf("heavy-%d", i)
		got, ok := listed[k]
		if !ok {
			t.Errorf("%s (%d of %d checks) is not listed; %d rows", k, exact[k], total, len(rows))
		} else if abs(got-exact[k]) > total/100 {
			t.Errorf("%s counted %d, exact %d (±%d)", k, got, exact[k], total/100)
		}
	}
}
