package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// allowN runs checks of cost 1 that must all be allowed, and returns them.
func allowN(t *testing.T, lim *limiter.Limiter, key string, p limiter.Policy, n int) []limiter.Decision {
	t.Helper()
	var ds []limiter.Decision
	for range n {
		d, err := lim.Allow(context.Background(), key, p, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("check %d: %+v %v", len(ds)+1, d, err)
		}
		ds = append(ds, d)
	}
	return ds
}

func step(t *testing.T, e httplimit.Explanation, name string) httplimit.StepWhy {
	t.Helper()
	for _, s := range e.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no step %q in %+v", name, e.Steps)
	return httplimit.StepWhy{}
}

// TestExplainOneRule: a denial of a one-rule policy is explained by its own
// numbers: the window (now − 10 s, now], its count, and the oldest entry —
// the first allowed check's score — that must slide out, with the retry's
// sum; the steps carry them and say nothing was recorded.
func TestExplainOneRule(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "e1=3/10s")
	key := "x-" + uuid.NewString()
	ds := allowN(t, lim, key, p, 3)
	d, err := lim.Allow(context.Background(), key, p, 1)
	if err != nil || d.Allowed {
		t.Fatalf("the 4th check: %+v %v", d, err)
	}
	e := httplimit.Explain(d, p)
	if e.Outcome != httplimit.OutcomeDenied || e.NowMs != d.NowMs || e.RetryAfterMs != d.RetryAfterMs || len(e.Rules) != 1 || !e.Complete {
		t.Fatalf("explanation %+v of %+v", e, d)
	}
	r := e.Rules[0]
	first := ds[0].NowMs
	if r.Name != "e1" || r.Count != 3 || r.Fits || r.K != 1 || r.FromMs != d.NowMs-10000 || r.ToMs != d.NowMs {
		t.Fatalf("rule %+v", r)
	}
	if r.KthMs == nil || *r.KthMs != first || r.OldestMs == nil || *r.OldestMs != first {
		t.Fatalf("the entry that slides out: %+v, want the first check's score %d", r, first)
	}
	want := fmt.Sprintf("retryAfterMs = kth + window − now = %d + 10000 − %d = %d", first, d.NowMs, d.RetryAfterMs)
	if r.Arithmetic != want || first+10000-d.NowMs != d.RetryAfterMs {
		t.Fatalf("arithmetic %q, want %q", r.Arithmetic, want)
	}
	if !strings.Contains(r.Text, want) || !strings.Contains(e.Text, "retry in "+fmt.Sprint(d.RetryAfterMs)+" ms") {
		t.Fatalf("texts %q / %q", r.Text, e.Text)
	}
	if s := step(t, e, "now"); s.Detail != fmt.Sprintf("now = %d", d.NowMs) || s.Skipped {
		t.Fatalf("step now: %+v", s)
	}
	if s := step(t, e, "rules"); !strings.Contains(s.Detail, want) {
		t.Fatalf("step rules: %+v", s)
	}
	if s := step(t, e, "record"); !s.Skipped {
		t.Fatalf("a denial recorded: %+v", s)
	}
	if s := step(t, e, "lock"); !s.Skipped { // the policy has no lock
		t.Fatalf("step lock: %+v", s)
	}
	// The allowed one before it: 2 in the window, room, its entry recorded.
	a := httplimit.Explain(ds[2], p)
	if a.Outcome != httplimit.OutcomeAllowed || a.Rules[0].Count != 2 || !a.Rules[0].Fits || a.Rules[0].KthMs != nil || step(t, a, "record").Skipped {
		t.Fatalf("the allowed check: %+v", a)
	}
}

// TestExplainTwoRules: with two rules and cost 2, each violated rule names
// its own k-th oldest entry — the 2nd for 3/10s, the 1st for 4/1m — and
// the retry is the larger sum, the binding rule's.
func TestExplainTwoRules(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "e2=3/10s,4/1m")
	key := "x-" + uuid.NewString()
	ds := allowN(t, lim, key, p, 3)
	d, err := lim.Allow(context.Background(), key, p, 2)
	if err != nil || d.Allowed {
		t.Fatalf("the cost-2 check: %+v %v", d, err)
	}
	e := httplimit.Explain(d, p)
	if len(e.Rules) != 2 || e.Cost != 2 {
		t.Fatalf("explanation %+v", e)
	}
	short, long := e.Rules[0], e.Rules[1]
	if short.Name != "e2/10" || short.K != 2 || short.KthMs == nil || *short.KthMs != ds[1].NowMs || short.RetryMs != ds[1].NowMs+10000-d.NowMs {
		t.Fatalf("3/10s: %+v, want k 2 at %d", short, ds[1].NowMs)
	}
	if long.Name != "e2/60" || long.K != 1 || long.KthMs == nil || *long.KthMs != ds[0].NowMs || long.RetryMs != ds[0].NowMs+60000-d.NowMs {
		t.Fatalf("4/1m: %+v, want k 1 at %d", long, ds[0].NowMs)
	}
	if !long.Binding || short.Binding || d.RetryAfterMs != long.RetryMs {
		t.Fatalf("binding: %+v %+v, retry %d", short, long, d.RetryAfterMs)
	}
	if !strings.Contains(e.Text, "e2/10 and e2/60 had no room for cost 2") {
		t.Fatalf("text %q", e.Text)
	}
}

// TestExplainLock: a denial that locks the key explains the lock — its end
// and level — and the lock step carries them.
func TestExplainLock(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "e3=1/10s+lock=1m")
	key := "x-" + uuid.NewString()
	allowN(t, lim, key, p, 1)
	d, err := lim.Allow(context.Background(), key, p, 1)
	if err != nil || !d.Locked {
		t.Fatalf("the locking denial: %+v %v", d, err)
	}
	e := httplimit.Explain(d, p)
	if e.Outcome != httplimit.OutcomeLocked || e.Lock == nil || e.Lock.UntilMs != d.LockUntilMs || e.Lock.Level != 1 {
		t.Fatalf("explanation %+v", e)
	}
	if want := fmt.Sprintf("%d − %d = %d ms left", d.LockUntilMs, d.NowMs, d.LockUntilMs-d.NowMs); !strings.Contains(e.Lock.Text, want) {
		t.Fatalf("lock text %q, want %q", e.Lock.Text, want)
	}
	if s := step(t, e, "lock"); s.Skipped || !strings.Contains(s.Detail, fmt.Sprint(d.LockUntilMs)) {
		t.Fatalf("step lock: %+v", s)
	}
}

// TestExplainQuota: a calendar quota's denial names its period's bounds,
// its counter, and the retry to the next period's start.
func TestExplainQuota(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "e4=1/day")
	key := "x-" + uuid.NewString()
	allowN(t, lim, key, p, 1)
	d, err := lim.Allow(context.Background(), key, p, 1)
	if err != nil || d.Allowed {
		t.Fatalf("the 2nd check: %+v %v", d, err)
	}
	e := httplimit.Explain(d, p)
	r := e.Rules[0]
	if r.Period != limiter.Day || r.Count != 1 || r.Fits || r.ToMs-r.FromMs != d.Rules[0].PeriodMs || r.FromMs > d.NowMs || r.ToMs <= d.NowMs {
		t.Fatalf("quota rule %+v of %+v", r, d.Rules[0])
	}
	if r.RetryMs != r.ToMs-d.NowMs || r.RetryMs != d.RetryAfterMs || r.KthMs != nil {
		t.Fatalf("retry %d, want the day's end %d − now %d", r.RetryMs, r.ToMs, d.NowMs)
	}
	if s := step(t, e, "quotas"); s.Skipped || !strings.Contains(s.Detail, fmt.Sprintf("[%d, %d)", r.FromMs, r.ToMs)) {
		t.Fatalf("step quotas: %+v", s)
	}
}

// TestExplainBookedWait: a check that may wait and books a slot is
// explained at its slot: the booking's moment and wait, the rules counted
// there, and the wait and booking steps.
func TestExplainBookedWait(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "e5=1/2s")
	key := "x-" + uuid.NewString()
	first := allowN(t, lim, key, p, 1)[0]
	d, err := lim.AllowWithin(context.Background(), limiter.Within{Wait: 5 * time.Second}, key, p, 1)
	if err != nil || !d.Booked() {
		t.Fatalf("the waiting check: %+v %v", d, err)
	}
	e := httplimit.Explain(d, p)
	if e.Outcome != httplimit.OutcomeBooked || e.Booking == nil || e.Booking.BookedMs != d.BookedMs || e.Booking.WaitMs != d.BookedMs-d.NowMs || e.AtMs != d.BookedMs {
		t.Fatalf("explanation %+v of %+v", e, d)
	}
	if d.BookedMs != first.NowMs+2000 || e.Rules[0].FromMs != d.BookedMs-2000 || e.Rules[0].Count != 0 {
		t.Fatalf("the slot %d (first at %d), rule %+v", d.BookedMs, first.NowMs, e.Rules[0])
	}
	for _, name := range []string{"wait", "booking", "record"} {
		if s := step(t, e, name); s.Skipped || s.Detail == "" {
			t.Fatalf("step %s: %+v", name, s)
		}
	}
}

// TestExplainFailOpen: an answer the fail mode gave explains that nothing
// was decided.
func TestExplainFailOpen(t *testing.T) {
	e := httplimit.ExplainFailOpen()
	if e.Outcome != httplimit.OutcomeFailOpen || !strings.Contains(e.Text, "fail mode is open") || len(e.Rules) != 0 {
		t.Fatalf("%+v", e)
	}
}

// TestExplainRecalled: an allowed check's explanation rebuilt from the log
// has the numbers the check saw; a refunded one has no entry left.
func TestExplainRecalled(t *testing.T) {
	lim := newLimiter(t, redistest.URL(t))
	p := mustPolicy(t, "e6=5/10s,8/1m")
	key := "x-" + uuid.NewString()
	ds := allowN(t, lim, key, p, 3)
	rc, err := lim.Recall(context.Background(), key, p, ds[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	got, want := httplimit.ExplainRecalled(rc, p), httplimit.Explain(ds[2], p)
	for i := range want.Rules {
		g, w := got.Rules[i], want.Rules[i]
		if g.Name != w.Name || g.Count != w.Count || *g.OldestMs != *w.OldestMs || g.FromMs != w.FromMs {
			t.Fatalf("rule %d rebuilt %+v, decided %+v (gaps %v)", i, g, w, got.Gaps)
		}
	}
	if got.NowMs != ds[2].NowMs || got.Recalled == nil || got.Recalled.ID != ds[2].ID || (got.Complete != (len(got.Gaps) == 0)) {
		t.Fatalf("rebuilt %+v", got)
	}
	if _, err := lim.Refund(context.Background(), key, p, ds[2].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Recall(context.Background(), key, p, ds[2].ID); !errors.Is(err, limiter.ErrNoEntry) {
		t.Fatalf("a refunded check: %v", err)
	}
}
