package limiter_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// waitCheck is a check of cost that may wait up to wait for a slot.
func waitCheck(t testing.TB, lim *limiter.Limiter, key string, p limiter.Policy, cost int, wait time.Duration) limiter.Decision {
	t.Helper()
	d, err := lim.AllowWithin(context.Background(), limiter.Within{Wait: wait}, key, p, cost)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestWaitBooksTheSlot: a check the rules deny, whose retry is within its
// wait, is recorded at once at the first moment its cost fits — the retry
// after now — and the next one books behind it; one whose retry is beyond
// its wait is denied and records nothing.
func TestWaitBooksTheSlot(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := cachedLimiter(t, c) // it must not answer a check that may book
	p := mustPolicy(t, "wt=2/1s")
	key := uniqueKey(t)
	a := allow(t, lim, key, p, 1)
	time.Sleep(5 * time.Millisecond) // apart, so each slot frees at its own moment
	b := allow(t, lim, key, p, 1)
	if !a.Allowed || !b.Allowed {
		t.Fatalf("the first two: %+v %+v", a, b)
	}
	// Denied without a wait: the deny cache now holds the key.
	if d := allow(t, lim, key, p, 1); d.Allowed || d.Booked() {
		t.Fatalf("a check without a wait on a full window: %+v", d)
	}
	if d := allow(t, lim, key, p, 1); !d.Cached {
		t.Fatalf("the next check without a wait: %+v, want the deny cache's", d)
	}
	before := len(members(t, c, key, p))
	if d := waitCheck(t, lim, key, p, 1, 10*time.Millisecond); d.Allowed || d.Booked() || d.RetryAfterMs <= 10 {
		t.Fatalf("a wait shorter than the retry: %+v, want denied", d)
	}
	if n := len(members(t, c, key, p)); n != before {
		t.Fatalf("a denied wait recorded: %d entries, had %d", n, before)
	}
	d1 := waitCheck(t, lim, key, p, 1, 5*time.Second)
	if !d1.Allowed || !d1.Booked() || d1.BookedMs != a.NowMs+1000 || d1.WaitMs() != d1.BookedMs-d1.NowMs || d1.ID == "" {
		t.Fatalf("the first waiter: %+v, want booked at %d", d1, a.NowMs+1000)
	}
	if r := d1.Rules[0]; r.Count != 2 || r.Remaining != 0 || r.OldestMs != b.NowMs {
		t.Fatalf("the first waiter's rule at its slot: %+v, want 2 entries, the oldest at %d", r, b.NowMs)
	}
	d2 := waitCheck(t, lim, key, p, 1, 5*time.Second)
	if !d2.Booked() || d2.BookedMs != b.NowMs+1000 {
		t.Fatalf("the second waiter: %+v, want booked at %d", d2, b.NowMs+1000)
	}
	d3 := waitCheck(t, lim, key, p, 1, 5*time.Second)
	if !d3.Booked() || d3.BookedMs != d1.BookedMs+1000 {
		t.Fatalf("the third waiter: %+v, want booked at %d, behind the first", d3, d1.BookedMs+1000)
	}
	scores := map[string]int64{}
	for _, z := range members(t, c, key, p) {
		scores[z.Member.(string)] = int64(z.Score)
	}
	for _, d := range []limiter.Decision{d1, d2, d3} {
		if scores[d.ID] != d.BookedMs {
			t.Fatalf("booking %s is scored %d, want %d", d.ID, scores[d.ID], d.BookedMs)
		}
	}
	// A check without a wait sees the bookings: denied until the third's
	// slot slides out.
	if d := allow(t, lim, key, p, 1); d.Allowed || d.RetryAfterMs < d2.BookedMs+1000-d.NowMs {
		t.Fatalf("a check after the bookings: %+v, want denied past %d", d, d2.BookedMs+1000)
	}
}

// TestWaitErrors: a wait only books on the log; below 0 or above 30 s it is
// refused.
func TestWaitErrors(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := direct(c)
	for _, alg := range algorithms {
		if alg == limiter.Log {
			continue
		}
		p := mustPolicy(t, "we=2/1s@"+string(alg))
		if _, err := lim.AllowWithin(context.Background(), limiter.Within{Wait: time.Second}, uniqueKey(t), p, 1); !errors.Is(err, limiter.ErrWaitNotLog) {
			t.Fatalf("%s: %v, want ErrWaitNotLog", alg, err)
		}
	}
	p := mustPolicy(t, "we=2/1s")
	for _, w := range []time.Duration{-time.Millisecond, limiter.MaxWait + time.Millisecond} {
		if _, err := lim.AllowWithin(context.Background(), limiter.Within{Wait: w}, uniqueKey(t), p, 1); !errors.Is(err, limiter.ErrInvalidWait) {
			t.Fatalf("wait %v: %v, want ErrInvalidWait", w, err)
		}
	}
}

// TestWaitModel runs random checks — costs 1 to 3, waits up to 3 s, a few
// refunds of bookings — on two rules against a model of the log: each
// check is allowed at once, booked, or denied exactly as the first moment
// S >= now at which every rule's (S - w, +inf) has room for its cost, and
// no window (T - w, T] of the sorted set ever holds more than its limit.
func TestWaitModel(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := direct(c)
	p := mustPolicy(t, "wm=4/1s,9/3s")
	key := uniqueKey(t)
	rng := rand.New(rand.NewPCG(33, uint64(time.Now().UnixNano())))
	type entry struct {
		id    string
		score int64
		n     int
	}
	var model []entry               // the entries inside the longest window
	all := map[string]entry{}       // every entry ever recorded and not refunded
	count := func(from int64) int { // entries scored after from
		n := 0
		for _, e := range model {
			if e.score > from {
				n += e.n
			}
		}
		return n
	}
	fits := func(s int64, cost int) bool {
		for _, r := range p.Rules {
			if count(s-r.WindowMs())+cost > r.Limit {
				return false
			}
		}
		return true
	}
	booked := 0
	for i := range 300 {
		if rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		}
		if rng.IntN(12) == 0 && len(model) > 0 {
			e := model[rng.IntN(len(model))]
			if _, err := lim.Refund(context.Background(), key, p, e.id); err != nil {
				t.Fatal(err)
			}
			model = slices.DeleteFunc(model, func(m entry) bool { return m.id == e.id })
			delete(all, e.id)
			continue
		}
		cost, wait := 1+rng.IntN(3), time.Duration(rng.IntN(3000))*time.Millisecond
		d := waitCheck(t, lim, key, p, cost, wait)
		now := d.NowMs
		// The first S >= now where the cost fits: now, or just as an
		// entry leaves some rule's window.
		cands := []int64{now}
		for _, e := range model {
			for _, r := range p.Rules {
				if s := e.score + r.WindowMs(); s > now {
					cands = append(cands, s)
				}
			}
		}
		slices.Sort(cands)
		var slot int64 = -1
		for _, s := range cands {
			if fits(s, cost) {
				slot = s
				break
			}
		}
		switch {
		case slot == now:
			if !d.Allowed || d.Booked() {
				t.Fatalf("check %d (cost %d): %+v, want allowed now", i, cost, d)
			}
			model = append(model, entry{d.ID, now, cost})
			all[d.ID] = entry{d.ID, now, cost}
		case slot-now <= wait.Milliseconds() && wait >= time.Millisecond:
			if !d.Allowed || d.BookedMs != slot {
				t.Fatalf("check %d (cost %d, wait %v): %+v, want booked at %d (+%d)", i, cost, wait, d, slot, slot-now)
			}
			model = append(model, entry{d.ID, slot, cost})
			all[d.ID] = entry{d.ID, slot, cost}
			booked++
		default:
			if d.Allowed || d.Booked() || d.RetryAfterMs != slot-now {
				t.Fatalf("check %d (cost %d, wait %v): %+v, want denied, retry %d", i, cost, wait, d, slot-now)
			}
		}
		// The model's entries still inside the longest window are the log's.
		model = slices.DeleteFunc(model, func(e entry) bool { return e.score <= now-3000 })
	}
	t.Logf("%d checks booked", booked)
	if booked < 10 {
		t.Fatalf("only %d checks booked: the test did not exercise bookings", booked)
	}
	// The log holds the model's entries still inside the longest window.
	var scores []int64
	for _, z := range members(t, c, key, p) {
		scores = append(scores, int64(z.Score))
	}
	var want []int64
	for _, e := range model {
		for range e.n {
			want = append(want, e.score)
		}
	}
	slices.Sort(want)
	if !slices.Equal(scores, want) {
		t.Fatalf("the log's scores %v, the model's %v", scores, want)
	}
	// No window of any rule ever held more than its limit: every entry
	// recorded and not refunded, slid over.
	var every []int64
	for _, e := range all {
		for range e.n {
			every = append(every, e.score)
		}
	}
	slices.Sort(every)
	for _, r := range p.Rules {
		if n, from := fullestWindow(every, r.WindowMs()); n > r.Limit {
			t.Fatalf("the %d ms window from %d holds %d entries, limit %d", r.WindowMs(), from, n, r.Limit)
		}
	}
}

// fullestWindow is the most sorted scores any window of w ms holds, and
// the score that window starts at.
func fullestWindow(scores []int64, w int64) (n int, from int64) {
	j := 0
	for i, s := range scores {
		for scores[j] <= s-w {
			j++
		}
		if i-j+1 > n {
			n, from = i-j+1, scores[j]
		}
	}
	return n, from
}
