package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

func refund(t testing.TB, lim *limiter.Limiter, key string, p limiter.Policy, id string) limiter.Adjustment {
	t.Helper()
	a, err := lim.Refund(context.Background(), key, p, id)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func settle(t testing.TB, lim *limiter.Limiter, key string, p limiter.Policy, id string, cost int) limiter.Adjustment {
	t.Helper()
	a, err := lim.Settle(context.Background(), key, p, id, cost)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestRefund: a refund takes back exactly the entries of its check, frees
// their room at once, and a second refund finds nothing.
func TestRefund(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := direct(c)
	p := mustPolicy(t, "refund=5/10s,8/1m")
	key := uniqueKey(t)
	first := allow(t, lim, key, p, 1)
	d := allow(t, lim, key, p, 3)
	allow(t, lim, key, p, 1)
	if !d.Allowed {
		t.Fatalf("cost 3 with 4 left: %+v", d)
	}
	a := refund(t, lim, key, p, d.ID)
	if a.Was != 3 || a.Now != 0 || a.ID != d.ID || a.Key != key || a.Policy != p.Name {
		t.Fatalf("refund of a cost-3 check: %+v", a)
	}
	for i, want := range []int{2, 2} {
		if r := a.Rules[i]; r.Count != want || r.Remaining != r.Limit-want || r.OldestMs != first.NowMs {
			t.Errorf("rule %d after the refund: %+v, want count %d, oldest %d", i, r, want, first.NowMs)
		}
	}
	if a.Bound().WindowMs != 10_000 {
		t.Errorf("binding rule %+v: want the one with least room, 5/10s", a.Bound())
	}
	if again := refund(t, lim, key, p, d.ID); again.Was != 0 || again.Now != 0 || again.Rules[0].Count != 2 {
		t.Errorf("a second refund: %+v, want nothing found and nothing changed", again)
	}
	// The room is free: three more fit in 5/10s.
	if e := allow(t, lim, key, p, 3); !e.Allowed || e.Bound().Count != 5 {
		t.Errorf("cost 3 after the refund: %+v", e)
	}
	if none := refund(t, lim, key, p, "00000000-0000-4000-8000-000000000000"); none.Was != 0 {
		t.Errorf("a refund of an id never recorded: %+v", none)
	}
}

// TestSettle: a settle to fewer entries drops the highest-numbered ones, to
// more adds them at the check's own score — past the limit, as a debt later
// checks wait out exactly — and an id with nothing left changes nothing.
func TestSettle(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := direct(c)
	p := mustPolicy(t, "settle=5/2s")
	key := uniqueKey(t)
	d := allow(t, lim, key, p, 2)
	a := settle(t, lim, key, p, d.ID, 4)
	if a.Was != 2 || a.Now != 4 || a.Bound().Count != 4 {
		t.Fatalf("settle 2 → 4: %+v", a)
	}
	w, err := lim.Window(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range w.Entries {
		want := d.ID
		if i > 0 {
			want += ":" + string(rune('0'+i))
		}
		if e.ID != want || e.Ms != d.NowMs {
			t.Errorf("entry %d: %+v, want %s at the check's score %d", i, e, want, d.NowMs)
		}
	}
	if a := settle(t, lim, key, p, d.ID, 1); a.Was != 4 || a.Now != 1 || a.Bound().Count != 1 {
		t.Fatalf("settle 4 → 1: %+v", a)
	}
	e := allow(t, lim, key, p, 1)
	// A debt: five more than the limit's room, recorded at e's score.
	if a := settle(t, lim, key, p, e.ID, 5); a.Now != 5 || a.Bound().Count != 6 || a.Bound().Remaining != 0 {
		t.Fatalf("settle 1 → 5 on a window of 2: %+v, want 6 entries, a debt of one", a)
	}
	// The next check waits until d's entry and one of e's have slid out:
	// all of e's entries share its score, so until e's.
	n := allow(t, lim, key, p, 1)
	if n.Allowed || n.RetryAfterMs != e.NowMs+2000-n.NowMs {
		t.Fatalf("a check after the debt: %+v, want a denial until %d", n, e.NowMs+2000)
	}
	if a := settle(t, lim, key, p, d.ID, 0); a.Was != 1 || a.Now != 0 {
		t.Fatalf("settle 1 → 0: %+v", a)
	}
	if a := settle(t, lim, key, p, d.ID, 3); a.Was != 0 || a.Now != 0 || a.Bound().Count != 5 {
		t.Fatalf("a settle after everything went: %+v, want nothing changed", a)
	}
}

// TestAdjustSlidOut: entries that slid out of the longest window are gone
// for a refund or a settle, even before a check evicts them.
func TestAdjustSlidOut(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := direct(c)
	p := mustPolicy(t, "slid=5/1s")
	key := uniqueKey(t)
	d := allow(t, lim, key, p, 2)
	time.Sleep(1100 * time.Millisecond)
	if a := refund(t, lim, key, p, d.ID); a.Was != 0 || a.Bound().Count != 0 {
		t.Errorf("a refund after the window: %+v", a)
	}
	if a := settle(t, lim, key, p, d.ID, 4); a.Was != 0 || a.Now != 0 || a.Bound().Count != 0 {
		t.Errorf("a settle after the window: %+v", a)
	}
}

// TestAdjustBadInput: another algorithm, a malformed id, a settled cost out
// of range or a bad key are refused before Redis is asked.
func TestAdjustBadInput(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := direct(c)
	key := uniqueKey(t)
	id := "9b2f1c4e-3a5d-4e6f-8a7b-0c1d2e3f4a5b"
	for _, tc := range []struct {
		policy, key, id string
		cost            int
		settle          bool
		want            error
	}{
		{"g=5/1m@gcra", key, id, 0, false, limiter.ErrNotLog},
		{"f=5/1m@fixed", key, id, 1, true, limiter.ErrNotLog},
		{"l=5/1m", key, "", 0, false, limiter.ErrInvalidID},
		{"l=5/1m", key, id + ":1", 0, false, limiter.ErrInvalidID},
		{"l=5/1m", key, "9B2F1C4E-3A5D-4E6F-8A7B-0C1D2E3F4A5B", 0, false, limiter.ErrInvalidID},
		{"l=5/1m", key, id, 6, true, limiter.ErrInvalidSettle},
		{"l=5/1m", key, id, -1, true, limiter.ErrInvalidSettle},
		{"l=5/1m", "bad key", id, 0, false, limiter.ErrInvalidKey},
	} {
		p := mustPolicy(t, tc.policy)
		var err error
		if tc.settle {
			_, err = lim.Settle(context.Background(), tc.key, p, tc.id, tc.cost)
		} else {
			_, err = lim.Refund(context.Background(), tc.key, p, tc.id)
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc, err, tc.want)
		}
	}
}

// TestRefundDropsCachedDenials: a refund on one instance makes room, and
// another instance whose deny cache held the window's denial drops it within
// the Pub/Sub delay: its next check goes to Redis and is allowed.
func TestRefundDropsCachedDenials(t *testing.T) {
	url := redistest.URL(t)
	a, b := cachedLimiter(t, newClient(t, url)), cachedLimiter(t, newClient(t, url))
	p := mustPolicy(t, "drop=2/1m")
	key := uniqueKey(t)
	first := allow(t, a, key, p, 1)
	allow(t, a, key, p, 1)
	fillUntilDenied(t, b, key, p)
	if d := allow(t, b, key, p, 1); !d.Cached {
		t.Fatalf("b's second denial: %+v, want it cached", d)
	}
	if r := refund(t, a, key, p, first.ID); r.Was != 1 {
		t.Fatalf("refund: %+v", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := allow(t, b, key, p, 1)
		if d.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after a refund on another instance, b still answers %+v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
