package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// These tests cannot wait for a midnight. They shift the calendar instead
// (limiter.WithCalendar, a test hook): the server computes the periods
// around its clock plus a shift and hands them to Redis shifted back, so a
// chosen local midnight — the 1st of a month across a DST change, say —
// falls a few seconds from now on Redis's clock, and the script, which
// picks the period by Redis's TIME, crosses it for real.

// onBothRedis runs f on a real redis-server and on the embedded Redis: the
// quota's script must decide alike on both.
func onBothRedis(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("redis-server", func(t *testing.T) { t.Parallel(); f(t, redistest.RealURL(t)) })
	t.Run("embedded", func(t *testing.T) { t.Parallel(); f(t, redistest.EmbeddedURL(t)) })
}

// shiftTo is the calendar shift that puts the local instant at lead from
// now on Redis's clock, and that moment on Redis's clock in ms.
func shiftTo(t testing.TB, c redis.UniversalClient, at time.Time, lead time.Duration) (time.Duration, int64) {
	t.Helper()
	shift := at.Sub(time.UnixMilli(redisNow(t, c)).Add(lead))
	return shift, at.UnixMilli() - shift.Milliseconds()
}

// quotaCount reads a quota's counter for the period starting at start
// (local time, as its key names it): 0 when there is none.
func quotaCount(t testing.TB, c redis.UniversalClient, key string, p limiter.Policy, pd limiter.Period, start time.Time) int {
	t.Helper()
	n, err := c.Get(context.Background(), limiter.QuotaKey(key, p, pd, start.UnixMilli())).Int()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return n
}

// quotaRule is d's rule of period pd.
func quotaRule(t testing.TB, d limiter.Decision, pd limiter.Period) limiter.RuleState {
	t.Helper()
	for _, r := range d.Rules {
		if r.Period == pd {
			return r
		}
	}
	t.Fatalf("no %s rule in %+v", pd, d)
	return limiter.RuleState{}
}

// TestQuotaDayNeverPastItsLimit: 10/1s,1000/day never admits the 1,001st
// request of a day, however the checks are spread — concurrent, of costs 1
// and 2, through two limiters (one batching, one not) — and starts the
// next day from 0 at local midnight, for every algorithm. The day's
// counter is seeded at 990, as a day of earlier traffic would have left it
// (at 10 a second, 990 requests take 99 s), and midnight in Asia/Kolkata
// (UTC+5:30) is put 2 s away on Redis's clock.
func TestQuotaDayNeverPastItsLimit(t *testing.T) {
	onBothRedis(t, func(t *testing.T, url string) {
		c := newClient(t, url)
		for _, alg := range algorithms {
			t.Run(string(alg), func(t *testing.T) {
				t.Parallel()
				p := mustPolicy(t, "tenk=10/1s,1000/day@"+string(alg)+"+tz=Asia/Kolkata")
				key := uniqueKey(t)
				loc := zone(t, "Asia/Kolkata")
				midnight := time.Date(2025, 6, 2, 0, 0, 0, 0, loc)
				yesterday, _ := limiter.Day.Bounds(midnight.Add(-time.Millisecond), loc)
				shift, boundary := shiftTo(t, c, midnight, 2*time.Second)
				ctx := context.Background()
				dayKey := limiter.QuotaKey(key, p, limiter.Day, yesterday.UnixMilli())
				if err := c.Set(ctx, dayKey, 990, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				lims := []*limiter.Limiter{
					limiter.New(c, limiter.WithDenyCache(0), limiter.WithCalendar(nil, shift)),
					limiter.New(newClient(t, url), limiter.WithDenyCache(0), limiter.WithoutBatching(), limiter.WithCalendar(nil, shift)),
				}
				type result struct {
					d    limiter.Decision
					cost int
				}
				var mu sync.Mutex
				var results []result
				var wg sync.WaitGroup
				stop := time.Now().Add(3500 * time.Millisecond)
				for g := range 6 {
					wg.Go(func() {
						for time.Now().Before(stop) {
							cost := 1 + g%2
							d, err := lims[g%2].Allow(ctx, key, p, cost)
							if err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							results = append(results, result{d, cost})
							mu.Unlock()
							time.Sleep(10 * time.Millisecond)
						}
					})
				}
				wg.Wait()
				before, after := 0, 0
				for _, r := range results {
					q := quotaRule(t, r.d, limiter.Day)
					if r.d.NowMs < boundary {
						if r.d.Allowed {
							before += r.cost
						} else if q.Violated && (q.RetryMs != boundary-r.d.NowMs || r.d.RetryAfterMs != max(q.RetryMs, r.d.Rules[0].RetryMs)) {
							t.Errorf("a denial by the day's quota at %d: retry %d (the day's %d), want %d, the time to midnight", r.d.NowMs, r.d.RetryAfterMs, q.RetryMs, boundary-r.d.NowMs)
						}
					} else if r.d.Allowed {
						after += r.cost
					}
					if q.Count > 1000 || q.PeriodMs != 24*3600_000 || q.ResetMs <= 0 {
						t.Errorf("the day's rule: %+v", q)
					}
				}
				if got := quotaCount(t, c, key, p, limiter.Day, yesterday); before != 10 || got != 1000 {
					t.Errorf("before midnight %d admitted (the counter says %d), want 10 (1,000)", before, got)
				}
				if got := quotaCount(t, c, key, p, limiter.Day, midnight); after == 0 || got != after {
					t.Errorf("after midnight %d admitted, the new day's counter %d", after, got)
				}
			})
		}
	})
}

// TestQuotaMonthResetsAtLocalMidnight: a month quota in Europe/Berlin and in
// America/New_York ends at local midnight of the 1st, a month whose length
// a DST change made 743 or 721 hours. The denial before it waits exactly
// until then, the counter expires after it, and the next month starts from
// 0. Three limiters stand for app instances whose clocks are right, 10
// minutes ahead (already in the next month) and 10 minutes behind: all
// count on the counter of the month Redis's clock is in, because the
// script, not the server, picks the period.
func TestQuotaMonthResetsAtLocalMidnight(t *testing.T) {
	for _, tc := range []struct {
		zone            string
		first           time.Time // the next month's first day, local
		before, nextLen time.Duration
	}{
		{"Europe/Berlin", time.Date(2025, 4, 1, 0, 0, 0, 0, zone(t, "Europe/Berlin")), 743 * time.Hour, 720 * time.Hour},
		{"America/New_York", time.Date(2025, 12, 1, 0, 0, 0, 0, zone(t, "America/New_York")), 721 * time.Hour, 744 * time.Hour},
	} {
		t.Run(tc.zone, func(t *testing.T) {
			t.Parallel()
			onBothRedis(t, func(t *testing.T, url string) {
				c := newClient(t, url)
				p := mustPolicy(t, "plan=3/month+tz="+tc.zone)
				key := uniqueKey(t)
				r0 := redisNow(t, c)
				shift, boundary := shiftTo(t, c, tc.first, 2500*time.Millisecond)
				skewed := func(by time.Duration) *limiter.Limiter {
					return limiter.New(c, limiter.WithDenyCache(0), limiter.WithCalendar(func() time.Time { return time.Now().Add(by) }, shift))
				}
				right, ahead, behind := skewed(0), skewed(10*time.Minute), skewed(-10*time.Minute)
				for i, lim := range []*limiter.Limiter{right, ahead, behind} {
					d := allow(t, lim, key, p, 1)
					q := quotaRule(t, d, limiter.Month)
					if !d.Allowed || q.Count != i+1 || q.PeriodMs != tc.before.Milliseconds() || q.ResetMs != boundary-d.NowMs {
						t.Fatalf("check %d: %+v, want allowed, count %d of a %v month ending in %d ms", i+1, d, i+1, tc.before, boundary-d.NowMs)
					}
				}
				d := allow(t, ahead, key, p, 1)
				if d.NowMs >= boundary {
					t.Fatalf("the machine is too slow for this test: 4 checks took past the month's end")
				}
				if d.Allowed || d.RetryAfterMs != boundary-d.NowMs || !quotaRule(t, d, limiter.Month).Violated {
					t.Fatalf("the 4th check of the month: %+v, want denied for exactly %d ms, until local midnight", d, boundary-d.NowMs)
				}
				month, _ := limiter.Month.Bounds(tc.first.Add(-time.Millisecond), tc.first.Location())
				if n := quotaCount(t, c, key, p, limiter.Month, month); n != 3 {
					t.Fatalf("the month's counter: %d after a denial, want 3", n)
				}
				ttl, err := c.PTTL(context.Background(), limiter.QuotaKey(key, p, limiter.Month, month.UnixMilli())).Result()
				expiry := boundary + time.Minute.Milliseconds() // its period's end plus a margin
				// (A ms less than that at most: TTLs count in finer units than TIME's ms.)
				if r1 := redisNow(t, c); err != nil || ttl.Milliseconds() > expiry-r0 || ttl.Milliseconds() < expiry-r1-1 {
					t.Fatalf("the month's counter expires in %v (%v), want at its end plus a minute: %d ms after now", ttl, err, expiry-r1)
				}
				for redisNow(t, c) < boundary {
					time.Sleep(20 * time.Millisecond)
				}
				e := allow(t, behind, key, p, 1)
				q := quotaRule(t, e, limiter.Month)
				if !e.Allowed || q.Count != 1 || q.PeriodMs != tc.nextLen.Milliseconds() || q.ResetMs != boundary+tc.nextLen.Milliseconds()-e.NowMs {
					t.Fatalf("the first check of the next month: %+v, want allowed, count 1 of a %v month", e, tc.nextLen)
				}
				if n, m := quotaCount(t, c, key, p, limiter.Month, tc.first), quotaCount(t, c, key, p, limiter.Month, month); n != 1 || m != 3 {
					t.Fatalf("counters: the new month %d, the last %d; want 1 and 3", n, m)
				}
			})
		})
	}
}

// snapshotState is every key of key's state under p but its quotas'
// counters, as strings: what a denial must leave as it is.
func snapshotState(t testing.TB, c redis.UniversalClient, key string, p limiter.Policy) string {
	t.Helper()
	ctx := context.Background()
	if p.AlgorithmName() == limiter.Log {
		return fmt.Sprint(members(t, c, key, p))
	}
	m, err := c.HGetAll(ctx, redisdata.StateKey(key, p.Name, string(p.AlgorithmName()))).Result()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(m)
}

// TestQuotaEveryAlgorithm: a quota is decided in the same script run as the
// windows under every algorithm: an allowed request takes its cost from
// the quota; a denial — by the quota or by a window — changes nothing, the
// counter and the window's state alike; a peek and a look count what is
// there and take nothing; a policy of quotas alone keeps no window state;
// a reset clears the counter.
func TestQuotaEveryAlgorithm(t *testing.T) {
	onBothRedis(t, func(t *testing.T, url string) {
		c := newClient(t, url)
		ctx := context.Background()
		// Noon of a fixed day: no midnight comes during the test.
		noon := time.Date(2025, 6, 18, 12, 0, 0, 0, time.UTC)
		shift, _ := shiftTo(t, c, noon, 0)
		lim := limiter.New(c, limiter.WithDenyCache(0), limiter.WithCalendar(nil, shift))
		day, dayEnd := limiter.Day.Bounds(noon, time.UTC)
		for _, alg := range algorithms {
			t.Run(string(alg), func(t *testing.T) {
				key := uniqueKey(t)
				p := mustPolicy(t, "q=5/1m,3/day@"+string(alg))
				d := allow(t, lim, key, p, 2)
				if q := quotaRule(t, d, limiter.Day); !d.Allowed || q.Count != 2 || q.Remaining != 1 || quotaCount(t, c, key, p, limiter.Day, day) != 2 {
					t.Fatalf("cost 2: %+v, want allowed, the day at 2", d)
				}
				state := snapshotState(t, c, key, p)
				d = allow(t, lim, key, p, 2)
				q := quotaRule(t, d, limiter.Day)
				end := dayEnd.UnixMilli() - shift.Milliseconds()
				if d.Allowed || !q.Violated || d.Rules[0].Violated || d.RetryAfterMs != end-d.NowMs || d.Bound().Period != limiter.Day {
					t.Fatalf("cost 2 on 1 left: %+v, want denied by the day until its end (%d ms)", d, end-d.NowMs)
				}
				if got := snapshotState(t, c, key, p); got != state || quotaCount(t, c, key, p, limiter.Day, day) != 2 {
					t.Fatalf("a quota's denial changed the state: %s → %s, counter %d", state, got, quotaCount(t, c, key, p, limiter.Day, day))
				}
				pk, err := lim.Peek(ctx, key, p, 1)
				if err != nil || !pk.Allowed || quotaRule(t, pk, limiter.Day).Count != 2 || quotaCount(t, c, key, p, limiter.Day, day) != 2 {
					t.Fatalf("a peek: %+v %v, want allowed, nothing taken", pk, err)
				}
				w, err := lim.Window(ctx, key, p)
				if err != nil || w.Rules[1].Period != limiter.Day || w.Rules[1].Count != 2 || w.Rules[1].Remaining != 1 || w.Rules[1].ResetMs != end-w.NowMs {
					t.Fatalf("the window: %+v %v", w, err)
				}
				if d := allow(t, lim, key, p, 1); !d.Allowed || quotaRule(t, d, limiter.Day).Remaining != 0 {
					t.Fatalf("the last of the day: %+v", d)
				}
				state = snapshotState(t, c, key, p)
				if d := allow(t, lim, key, p, 1); d.Allowed || d.RetryAfterMs != end-d.NowMs {
					t.Fatalf("past the day's quota: %+v", d)
				}
				if got := snapshotState(t, c, key, p); got != state || quotaCount(t, c, key, p, limiter.Day, day) != 3 {
					t.Fatalf("a quota's denial changed the state: %s → %s", state, got)
				}
				if err := lim.Reset(ctx, key, p); err != nil {
					t.Fatal(err)
				}
				if n := quotaCount(t, c, key, p, limiter.Day, day); n != 0 {
					t.Fatalf("after a reset the day counts %d", n)
				}

				// A denial by a window takes nothing from the quota either.
				wp := mustPolicy(t, "qw=2/1m,100/day@"+string(alg))
				allow(t, lim, key, wp, 1)
				allow(t, lim, key, wp, 1)
				if d := allow(t, lim, key, wp, 1); d.Allowed || !d.Rules[0].Violated || quotaRule(t, d, limiter.Day).Violated {
					t.Fatalf("the window's denial: %+v", d)
				}
				if n := quotaCount(t, c, key, wp, limiter.Day, day); n != 2 {
					t.Fatalf("after the window's denial the day counts %d, want 2", n)
				}

				// Quotas alone: no window state at all.
				qp := mustPolicy(t, "qo=2/day,5/week@"+string(alg))
				for i := range 3 {
					d := allow(t, lim, key, qp, 1)
					if d.Allowed != (i < 2) || len(d.Rules) != 2 || d.Rules[0].WindowMs != 0 || d.Rules[1].Period != limiter.Week {
						t.Fatalf("quotas alone, check %d: %+v", i+1, d)
					}
				}
				week, _ := limiter.Week.Bounds(noon, time.UTC)
				if n, err := c.Exists(ctx, redisdata.StateKey(key, qp.Name, string(alg))).Result(); err != nil || n != 0 ||
					quotaCount(t, c, key, qp, limiter.Day, day) != 2 || quotaCount(t, c, key, qp, limiter.Week, week) != 2 {
					t.Fatalf("quotas alone: window state %d (%v), day %d, week %d", n, err,
						quotaCount(t, c, key, qp, limiter.Day, day), quotaCount(t, c, key, qp, limiter.Week, week))
				}
				if w, err := lim.Window(ctx, key, qp); err != nil || w.Count != 2 || w.Limit != 2 || w.WindowMs != 0 || w.Truncated {
					t.Fatalf("the window of quotas alone: %+v %v", w, err)
				}
			})
		}
	})
}

// TestQuotaLocks: a quota's denial is a denial of the policy: it locks a
// policy that locks.
func TestQuotaLocks(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	noon := time.Date(2025, 6, 18, 12, 0, 0, 0, time.UTC)
	shift, _ := shiftTo(t, c, noon, 0)
	lim := limiter.New(c, limiter.WithDenyCache(0), limiter.WithCalendar(nil, shift))
	p := mustPolicy(t, "ql=5/1s,1/day+lock=1m")
	key := uniqueKey(t)
	allow(t, lim, key, p, 1)
	if d := allow(t, lim, key, p, 1); d.Allowed || !d.Locked || d.LockUntilMs != d.NowMs+60_000 {
		t.Fatalf("the quota's denial: %+v, want a lock of a minute", d)
	}
}

// TestQuotaDenyCache: the local deny cache answers a quota's denial exactly
// — the wait it reports never shorter than the time to midnight — and never
// once midnight has come on Redis's clock; a denial that leaves room for
// cost 1 is not kept at all. Midnight (UTC) is put 2.5 s away.
func TestQuotaDenyCache(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	shift, boundary := shiftTo(t, c, time.Date(2025, 6, 19, 0, 0, 0, 0, time.UTC), 2500*time.Millisecond)
	lim := cachedLimiter(t, c, limiter.WithCalendar(nil, shift))
	lost := servingLost(t, lim)
	p := mustPolicy(t, "dc=2/day")
	key := uniqueKey(t)
	d := fillUntilDenied(t, lim, key, p)
	if d.RetryAfterMs != boundary-d.NowMs {
		t.Fatalf("Redis's denial: %+v, want a retry of exactly %d ms", d, boundary-d.NowMs)
	}
	cached := 0
	for {
		t0 := redisNow(t, c)
		d := allow(t, lim, key, p, 1)
		t1 := redisNow(t, c)
		if d.Allowed {
			if d.NowMs < boundary {
				t.Fatalf("allowed at %d, before midnight %d: %+v", d.NowMs, boundary, d)
			}
			break
		}
		if d.Cached {
			cached++
			if t0 >= boundary {
				t.Fatalf("a cached denial answered at %d or later, past midnight %d", t0, boundary)
			}
			if d.RetryAfterMs < boundary-t1 || quotaRule(t, d, limiter.Day).RetryMs != d.RetryAfterMs {
				t.Fatalf("a cached denial's retry %d, shorter than the %d ms left to midnight: %+v", d.RetryAfterMs, boundary-t1, d)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if cached == 0 && !lost() {
		t.Fatal("the deny cache answered nothing before midnight")
	}

	// Cost 2 with one left: denied, but cost 1 fits, so nothing is kept.
	p2 := mustPolicy(t, "dc2=3/day")
	allow(t, lim, key, p2, 2)
	if d := allow(t, lim, key, p2, 2); d.Allowed || d.Cached {
		t.Fatalf("cost 2 on 1 left: %+v", d)
	}
	if d := allow(t, lim, key, p2, 1); !d.Allowed {
		t.Fatalf("cost 1 after a denial of cost 2: %+v, want allowed (not a cached denial)", d)
	}
	if d := allow(t, lim, key, p2, 1); d.Allowed || d.Cached {
		t.Fatalf("past the quota: %+v, want Redis's denial", d)
	}
	if d := allow(t, lim, key, p2, 1); !d.Cached && !lost() {
		t.Fatalf("the next check: %+v, want the cache's denial", d)
	}
}

// TestQuotasStartingTogether: on Monday 1 September 2025 a day, a week and a
// month all start at midnight. A policy with the three quotas keeps three
// counters (a policy's only quota has the plain name; several are told
// apart by their periods), so each counts its own: 3 a day admits 3.
func TestQuotasStartingTogether(t *testing.T) {
	onBothRedis(t, func(t *testing.T, url string) {
		c := newClient(t, url)
		p := mustPolicy(t, "together=3/day,4/week,5/month")
		key := uniqueKey(t)
		start := time.Date(2025, 9, 1, 0, 0, 0, 0, time.UTC)
		shift, _ := shiftTo(t, c, start.Add(time.Hour), 0) // an hour into the three periods
		lim := limiter.New(c, limiter.WithDenyCache(0), limiter.WithCalendar(nil, shift))
		for i := 1; i <= 4; i++ {
			d := allow(t, lim, key, p, 1)
			if d.Allowed != (i <= 3) || (i == 4 && !quotaRule(t, d, limiter.Day).Violated) {
				t.Fatalf("check %d: %+v, want the day's 3 allowed, then the day's denial", i, d)
			}
		}
		for _, pd := range []limiter.Period{limiter.Day, limiter.Week, limiter.Month} {
			if n := quotaCount(t, c, key, p, pd, start); n != 3 {
				t.Errorf("the %s's counter holds %d, want 3", pd, n)
			}
		}
	})
}
