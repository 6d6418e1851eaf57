package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// lockedUntilOut checks until the lock ends and returns the first answer
// after it, failing if any answer before it was not a locked denial or the
// lock ended at another moment than until (on Redis's clock).
func lockedUntilOut(t *testing.T, lim *limiter.Limiter, key string, p limiter.Policy, until int64) limiter.Decision {
	t.Helper()
	for {
		d := allow(t, lim, key, p, 1)
		if !d.Locked {
			if d.NowMs < until {
				t.Fatalf("unlocked at %d, %d ms before the lock's end %d: %+v", d.NowMs, until-d.NowMs, until, d)
			}
			return d
		}
		if d.Allowed || d.LockUntilMs != until || d.RetryAfterMs < until-d.NowMs || d.NowMs >= until {
			t.Fatalf("locked answer %+v: want a denial until %d", d, until)
		}
		time.Sleep(time.Duration(min(d.RetryAfterMs, 20)) * time.Millisecond)
	}
}

// TestLock, for every algorithm: the denial that finds no room locks the
// key for the lock time from that denial, on Redis's clock, exactly; every
// check meanwhile is denied as locked and records nothing, even with room
// in the rules; the next lock within a day doubles, and a reset clears the
// lock and its history.
func TestLock(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := direct(c)
	for _, alg := range algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			p := mustPolicy(t, "lk=2/1s@"+string(alg)+"+lock=2s")
			key := uniqueKey(t)
			fill := func() limiter.Decision {
				t.Helper()
				for range 10 {
					if d := allow(t, lim, key, p, 1); !d.Allowed {
						return d
					}
				}
				t.Fatal("10 checks allowed on 2/1s")
				return limiter.Decision{}
			}
			d := fill()
			if !d.Locked || d.LockLevel != 1 || d.LockUntilMs != d.NowMs+2000 || d.RetryAfterMs != 2000 || d.Bound().RetryMs != 2000 {
				t.Fatalf("the denial that locks: %+v, want level 1 until %d, retry 2000", d, d.NowMs+2000)
			}
			after := lockedUntilOut(t, lim, key, p, d.LockUntilMs)
			if !after.Allowed {
				t.Fatalf("the first check after the lock: %+v, want allowed (its rule has room)", after)
			}
			// Within a day of the last lock's end: twice as long.
			d2 := fill()
			if !d2.Locked || d2.LockLevel != 2 || d2.LockUntilMs != d2.NowMs+4000 {
				t.Fatalf("the next lock: %+v, want level 2 for 4 s", d2)
			}
			if err := lim.Reset(context.Background(), key, p); err != nil {
				t.Fatal(err)
			}
			if e := allow(t, lim, key, p, 1); !e.Allowed || e.Locked {
				t.Fatalf("a check after a reset: %+v, want allowed", e)
			}
			d3 := fill()
			if !d3.Locked || d3.LockLevel != 1 || d3.LockUntilMs != d3.NowMs+2000 {
				t.Fatalf("the first lock after a reset: %+v, want level 1 for 2 s", d3)
			}
		})
	}
}

// TestLockDoublesUpToADay: the lock doubles with each lock in a row, and
// stops at a day.
func TestLockDoublesUpToADay(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := direct(c)
	p := mustPolicy(t, "lkday=1/1s+lock=6h")
	key := uniqueKey(t)
	allow(t, lim, key, p, 1)
	d := allow(t, lim, key, p, 1)
	if d.LockUntilMs-d.NowMs != 6*3600_000 {
		t.Fatalf("the first lock: %+v", d)
	}
	// Expire the lock by hand, as if it had run out, keeping its history:
	// the next lock is the second in a row.
	lockKey := redisdata.LockKey(key, p.Name)
	for _, want := range []int64{12, 24, 24} {
		now := redisNow(t, c)
		if err := c.HSet(context.Background(), lockKey, "until", now-1).Err(); err != nil {
			t.Fatal(err)
		}
		e := allow(t, lim, key, p, 1)
		if !e.Locked || e.LockUntilMs-e.NowMs != want*3600_000 {
			t.Fatalf("a lock in a row: %+v, want %d h", e, want)
		}
	}
}

// TestLockAcrossInstances: a lock made on one instance holds on another —
// it lives in Redis — and neither a peek nor a cached answer makes one.
func TestLockAcrossInstances(t *testing.T) {
	url := redistest.URL(t)
	c := newClient(t, url)
	a, b := cachedLimiter(t, c), cachedLimiter(t, newClient(t, url))
	p := mustPolicy(t, "lkx=1/1m+lock=30s")
	key := uniqueKey(t)
	allow(t, a, key, p, 1)
	pk, err := b.Peek(context.Background(), key, p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(context.Background(), redisdata.LockKey(key, p.Name)).Result(); err != nil || n != 0 || pk.Allowed || pk.Locked {
		t.Fatalf("a peek on a full window: %+v (lock keys %d, %v), want a denial that locks nothing", pk, n, err)
	}
	d := allow(t, a, key, p, 1)
	if !d.Locked || d.LockLevel != 1 {
		t.Fatalf("a's denial: %+v, want a lock", d)
	}
	e := allow(t, b, key, p, 1)
	if !e.Locked || e.LockUntilMs != d.LockUntilMs || e.LockLevel != 1 || e.Cached {
		t.Fatalf("b's check: %+v, want a's lock, from Redis", e)
	}
	f := allow(t, b, key, p, 1)
	if !f.Cached || !f.Locked || f.LockUntilMs != d.LockUntilMs || f.RetryAfterMs < d.LockUntilMs-f.NowMs {
		t.Fatalf("b's next check: %+v, want the lock from b's cache", f)
	}
}
