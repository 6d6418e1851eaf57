package limiter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

func mustPolicy(t testing.TB, s string) limiter.Policy {
	t.Helper()
	p, err := limiter.ParsePolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newClient is a client for url that never retries a command: a script whose
// reply timed out may have run, and running it again would record twice (the
// server's client is built the same way). Its timeouts are generous, as the
// embedded Redis under the race detector on a loaded machine can take seconds
// to answer 500 concurrent checks.
func newClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = 30*time.Second, 30*time.Second, 30*time.Second
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// uniqueKey keeps tests apart when they share a Redis (RATESCOPE_TEST_REDIS_URL).
func uniqueKey(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		if limiter.ValidateKey(string(r)) != nil {
			return '-'
		}
		return r
	}, t.Name())
	return name[:min(len(name), 100)] + "-" + uuid.NewString()[:8]
}

func redisNow(t testing.TB, c redis.UniversalClient) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// seed writes entries with chosen scores, as earlier allowed requests would have.
func seed(t testing.TB, c redis.UniversalClient, key string, p limiter.Policy, scores ...int64) {
	t.Helper()
	zs := make([]redis.Z, len(scores))
	for i, s := range scores {
		zs[i] = redis.Z{Score: float64(s), Member: uuid.NewString()}
	}
	if err := c.ZAdd(context.Background(), redisdata.LogKey(key, p.Name), zs...).Err(); err != nil {
		t.Fatal(err)
	}
}

func members(t testing.TB, c redis.UniversalClient, key string, p limiter.Policy) []redis.Z {
	t.Helper()
	zs, err := c.ZRangeWithScores(context.Background(), redisdata.LogKey(key, p.Name), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return zs
}

// TestExactUnderConcurrency is the product's promise: 500 concurrent checks
// against a limit of 37 allow exactly 37, also across two limiters with their
// own connection pools (as two app instances would be): one batching checks
// into pipelines (the default), one sending each alone.
func TestExactUnderConcurrency(t *testing.T) {
	url := redistest.URL(t)
	p := mustPolicy(t, "burst=37/1m")
	lims := []*limiter.Limiter{
		limiter.New(newClient(t, url)),
		limiter.New(newClient(t, url), limiter.WithoutBatching()),
	}
	for run := range 20 {
		key := fmt.Sprintf("%s-%d", uniqueKey(t), run)
		var wg sync.WaitGroup
		var mu sync.Mutex
		counts := map[bool]int{}
		start := make(chan struct{})
		var errs []error
		for i := range 500 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				d, err := lims[i%2].Allow(context.Background(), key, p, 1)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				counts[d.Allowed]++
			}()
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("run %d: %d errors, first: %v", run, len(errs), errs[0])
		}
		if counts[true] != 37 || counts[false] != 463 {
			t.Fatalf("run %d: allowed %d, denied %d; want exactly 37 and 463", run, counts[true], counts[false])
		}
		if n := len(members(t, newClient(t, url), key, p)); n != 37 {
			t.Fatalf("run %d: %d entries in the log, want 37", run, n)
		}
	}
}

func TestAllowRecordsAndCounts(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "demo=5/10s")
	key := uniqueKey(t)
	for i := 1; i <= 5; i++ {
		d, err := lim.Allow(context.Background(), key, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		b := d.Bound()
		if !d.Allowed || b.Count != i || b.Remaining != 5-i || d.RetryAfterMs != 0 {
			t.Fatalf("request %d: %+v", i, d)
		}
		if _, err := uuid.Parse(d.ID); err != nil || uuid.MustParse(d.ID).Version() != 4 {
			t.Fatalf("request %d: id %q is not a UUID v4", i, d.ID)
		}
	}
	zs := members(t, c, key, p)
	if len(zs) != 5 {
		t.Fatalf("%d entries, want 5", len(zs))
	}
	ttl, err := c.PTTL(context.Background(), redisdata.LogKey(key, p.Name)).Result()
	if err != nil || ttl <= 9*time.Second || ttl > 10*time.Second {
		t.Fatalf("PTTL = %v, %v; want the window (10s)", ttl, err)
	}
}

// TestRejectedLeaveNoEntry: a denied request must not extend anyone's wait.
func TestRejectedLeaveNoEntry(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "demo=3/10s")
	key := uniqueKey(t)
	for range 3 {
		if d, err := lim.Allow(context.Background(), key, p, 1); err != nil || !d.Allowed {
			t.Fatalf("fill: %+v %v", d, err)
		}
	}
	before := members(t, c, key, p)
	var firstRetry int64
	for i := range 10 {
		d, err := lim.Allow(context.Background(), key, p, 1)
		if err != nil || d.Allowed || d.ID != "" {
			t.Fatalf("denial %d: %+v %v", i, d, err)
		}
		if i == 0 {
			firstRetry = d.RetryAfterMs + d.NowMs
		} else if got := d.RetryAfterMs + d.NowMs; got != firstRetry {
			t.Fatalf("denial %d moved the retry instant from %d to %d", i, firstRetry, got)
		}
	}
	if after := members(t, c, key, p); !slices.Equal(before, after) {
		t.Fatalf("denied requests changed the log:\nbefore %v\nafter  %v", before, after)
	}
}

// TestEvictionBoundary: an entry scored exactly now - window is out of the
// window (not counted) and is evicted; one a millisecond later is in.
func TestEvictionBoundary(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	// seedAcross puts one entry every millisecond across the boundary the
	// script will see, so whatever its now is, an entry sits exactly at
	// now - 10s.
	seedAcross := func(t *testing.T, key string, p limiter.Policy) (t0 int64, scores []int64) {
		t0 = redisNow(t, c)
		for s := t0 - 10_000 - 50; s <= t0-10_000+2_000; s++ {
			scores = append(scores, s)
		}
		seed(t, c, key, p, scores...)
		return t0, scores
	}
	inside := func(t *testing.T, d limiter.Decision, t0 int64, scores []int64) (cut int64, n int) {
		cut = d.NowMs - 10_000
		if cut > t0-10_000+2_000 {
			t.Fatalf("the check ran %d ms after seeding; the test needs < 2000", d.NowMs-t0)
		}
		for _, s := range scores {
			if s > cut {
				n++
			}
		}
		return cut, n
	}

	t.Run("counting", func(t *testing.T) {
		// The 1h rule keeps everything, so only ZCOUNT's bound decides.
		p := mustPolicy(t, "edge=10000/10s,20000/1h")
		key := uniqueKey(t)
		t0, scores := seedAcross(t, key, p)
		d, err := lim.Allow(context.Background(), key, p, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		cut, n := inside(t, d, t0, scores)
		if got := d.Rules[0].Count; got != n+1 {
			t.Fatalf("10s count = %d, want %d (entries scored > now-window, plus this one)", got, n+1)
		}
		if got := d.Rules[1].Count; got != len(scores)+1 {
			t.Fatalf("1h count = %d, want %d", got, len(scores)+1)
		}
		if d.Rules[0].OldestMs != cut+1 {
			t.Fatalf("OldestMs = %d, want now-window+1 = %d", d.Rules[0].OldestMs, cut+1)
		}
	})

	t.Run("eviction", func(t *testing.T) {
		p := mustPolicy(t, "edge=10000/10s")
		key := uniqueKey(t)
		t0, scores := seedAcross(t, key, p)
		d, err := lim.Allow(context.Background(), key, p, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		cut, n := inside(t, d, t0, scores)
		if got := d.Bound().Count; got != n+1 {
			t.Fatalf("count = %d, want %d", got, n+1)
		}
		zs := members(t, c, key, p)
		if len(zs) != n+1 || int64(zs[0].Score) != cut+1 {
			t.Fatalf("%d entries left, oldest %d; want %d, oldest now-window+1 = %d: the boundary entry must be evicted",
				len(zs), int64(zs[0].Score), n+1, cut+1)
		}
	})
}

// TestEvictionIsBounded: a huge expired backlog is removed at most MaxEvict at
// a time, and counting stays right meanwhile.
func TestEvictionIsBounded(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "big=5/1s")
	key := uniqueKey(t)
	old := redisNow(t, c) - 60_000
	scores := make([]int64, 2500)
	for i := range scores {
		scores[i] = old + int64(i)
	}
	seed(t, c, key, p, scores...)
	for i, want := range []int{2500 - 1000 + 1, 2500 - 2000 + 2, 3} {
		d, err := lim.Allow(context.Background(), key, p, 1)
		if err != nil || !d.Allowed || d.Bound().Count != i+1 {
			t.Fatalf("check %d: %+v %v", i, d, err)
		}
		if n := len(members(t, c, key, p)); n != want {
			t.Fatalf("after check %d: %d entries, want %d", i, n, want)
		}
	}
}

// TestRetryAfterIsExact: the retry time is oldest relevant score + window -
// now, and a caller that waits exactly that long is allowed.
func TestRetryAfterIsExact(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "demo=3/2s")
	key := uniqueKey(t)
	t0 := redisNow(t, c)
	oldest := t0 - 1500
	seed(t, c, key, p, oldest, t0-1000, t0-500)
	d, err := lim.Allow(context.Background(), key, p, 1)
	if err != nil || d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	if want := oldest + 2000 - d.NowMs; d.RetryAfterMs != want {
		t.Fatalf("RetryAfterMs = %d, want oldest+window-now = %d", d.RetryAfterMs, want)
	}
	if d.Bound().OldestMs != oldest || d.Bound().ResetMs != d.RetryAfterMs {
		t.Fatalf("binding rule %+v", d.Bound())
	}
	time.Sleep(time.Duration(d.RetryAfterMs) * time.Millisecond)
	d2, err := lim.Allow(context.Background(), key, p, 1)
	if err != nil || !d2.Allowed {
		t.Fatalf("after waiting exactly RetryAfterMs: %+v %v", d2, err)
	}
	if d2.NowMs < d.NowMs+d.RetryAfterMs {
		t.Fatalf("clock went backwards: %d < %d", d2.NowMs, d.NowMs+d.RetryAfterMs)
	}
}

// TestRealWaitAfterDenial runs the whole cycle on the live clock: fill, deny,
// wait RetryAfterMs, allowed.
func TestRealWaitAfterDenial(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "short=2/1s")
	key := uniqueKey(t)
	for range 2 {
		if d, err := lim.Allow(context.Background(), key, p, 1); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
	}
	d, err := lim.Allow(context.Background(), key, p, 1)
	if err != nil || d.Allowed || d.RetryAfterMs <= 0 || d.RetryAfterMs > 1000 {
		t.Fatalf("%+v %v", d, err)
	}
	time.Sleep(time.Duration(d.RetryAfterMs) * time.Millisecond)
	if d, err := lim.Allow(context.Background(), key, p, 1); err != nil || !d.Allowed {
		t.Fatalf("after the wait: %+v %v", d, err)
	}
}

func TestCost(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "bulk=5/10s")
	ctx := context.Background()

	t.Run("records cost entries with one score", func(t *testing.T) {
		key := uniqueKey(t)
		d, err := lim.Allow(ctx, key, p, 3)
		if err != nil || !d.Allowed || d.Bound().Count != 3 || d.Bound().Remaining != 2 {
			t.Fatalf("%+v %v", d, err)
		}
		zs := members(t, c, key, p)
		var got []string
		for _, z := range zs {
			got = append(got, z.Member.(string))
			if int64(z.Score) != d.NowMs {
				t.Fatalf("score %v, want %d", z.Score, d.NowMs)
			}
		}
		slices.Sort(got)
		want := []string{d.ID, d.ID + ":1", d.ID + ":2"}
		if !slices.Equal(got, want) {
			t.Fatalf("members %v, want %v", got, want)
		}
	})

	t.Run("denied when cost does not fit; retry waits for the k-th oldest", func(t *testing.T) {
		key := uniqueKey(t)
		t0 := redisNow(t, c)
		seed(t, c, key, p, t0-4000, t0-3000, t0-2000, t0-1000)
		// 4 in the window, cost 3, limit 5: k = 4+3-5 = 2, so the second oldest.
		d, err := lim.Allow(ctx, key, p, 3)
		if err != nil || d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		if want := t0 - 3000 + 10_000 - d.NowMs; d.RetryAfterMs != want {
			t.Fatalf("RetryAfterMs = %d, want %d", d.RetryAfterMs, want)
		}
		if n := len(members(t, c, key, p)); n != 4 {
			t.Fatalf("denied cost request changed the log: %d entries", n)
		}
		// Cost 1 still fits.
		if d, err := lim.Allow(ctx, key, p, 1); err != nil || !d.Allowed || d.Bound().Count != 5 {
			t.Fatalf("%+v %v", d, err)
		}
	})

	t.Run("cost out of range", func(t *testing.T) {
		for _, cost := range []int{0, -1, 6} {
			if _, err := lim.Allow(ctx, uniqueKey(t), p, cost); err != limiter.ErrInvalidCost {
				t.Fatalf("cost %d: err = %v, want ErrInvalidCost", cost, err)
			}
		}
		// One log check adds at most 1,000 entries, whatever the limit.
		big := mustPolicy(t, "big=100000/10s")
		key := uniqueKey(t)
		if _, err := lim.Allow(ctx, key, big, 1001); err != limiter.ErrInvalidCost {
			t.Fatalf("cost 1001 on a log: err = %v, want ErrInvalidCost", err)
		}
		if _, err := lim.AllowEach(ctx, key, []limiter.Policy{big}, 1001); err != limiter.ErrInvalidCost {
			t.Fatalf("AllowEach, cost 1001 on a log: err = %v, want ErrInvalidCost", err)
		}
		if d, err := lim.Allow(ctx, key, big, 1000); err != nil || !d.Allowed || len(members(t, c, key, big)) != 1000 {
			t.Fatalf("cost 1000 on a log: %+v %v", d, err)
		}
	})
}

// TestMultiRule: all rules are checked on one log; the retry is the longest of
// the violated rules' retries, and the binding rule is reported.
func TestMultiRule(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "login=3/1s,5/1m")
	ctx := context.Background()

	t.Run("short rule binds", func(t *testing.T) {
		key := uniqueKey(t)
		t0 := redisNow(t, c)
		seed(t, c, key, p, t0-500, t0-400, t0-300)
		d, err := lim.Allow(ctx, key, p, 1)
		if err != nil || d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		if d.Binding != 0 || !d.Rules[0].Violated || d.Rules[1].Violated {
			t.Fatalf("rules %+v binding %d", d.Rules, d.Binding)
		}
		if want := t0 - 500 + 1000 - d.NowMs; d.RetryAfterMs != want {
			t.Fatalf("RetryAfterMs = %d, want %d", d.RetryAfterMs, want)
		}
		if d.Rules[1].Count != 3 || d.Rules[1].Remaining != 2 {
			t.Fatalf("long rule %+v", d.Rules[1])
		}
	})

	t.Run("both violated: the longest retry wins", func(t *testing.T) {
		key := uniqueKey(t)
		t0 := redisNow(t, c)
		seed(t, c, key, p, t0-30_000, t0-20_000, t0-300, t0-200, t0-100)
		d, err := lim.Allow(ctx, key, p, 1)
		if err != nil || d.Allowed || !d.Rules[0].Violated || !d.Rules[1].Violated {
			t.Fatalf("%+v %v", d, err)
		}
		if want := t0 - 30_000 + 60_000 - d.NowMs; d.RetryAfterMs != want || d.Binding != 1 {
			t.Fatalf("RetryAfterMs = %d (binding %d), want %d from the 1m rule", d.RetryAfterMs, d.Binding, want)
		}
	})

	t.Run("allowed: least remaining binds", func(t *testing.T) {
		key := uniqueKey(t)
		t0 := redisNow(t, c)
		seed(t, c, key, p, t0-30_000, t0-20_000, t0-10_000)
		d, err := lim.Allow(ctx, key, p, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		// 1s rule: 1 of 3 (2 left); 1m rule: 4 of 5 (1 left).
		if d.Binding != 1 || d.Rules[0].Remaining != 2 || d.Rules[1].Remaining != 1 {
			t.Fatalf("binding %d rules %+v", d.Binding, d.Rules)
		}
		if d.Rules[0].OldestMs != d.NowMs || d.Rules[1].OldestMs != t0-30_000 {
			t.Fatalf("oldest: %+v", d.Rules)
		}
	})

	t.Run("entries older than the longest window are evicted, not earlier", func(t *testing.T) {
		key := uniqueKey(t)
		t0 := redisNow(t, c)
		seed(t, c, key, p, t0-120_000, t0-5_000)
		if _, err := lim.Allow(ctx, key, p, 1); err != nil {
			t.Fatal(err)
		}
		if n := len(members(t, c, key, p)); n != 2 {
			t.Fatalf("%d entries, want 2 (the 5s-old one stays for the 1m rule)", n)
		}
	})
}

func TestWindowAndReset(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "demo=5/10s")
	ctx := context.Background()
	key := uniqueKey(t)
	t0 := redisNow(t, c)
	seed(t, c, key, p, t0-20_000, t0-10_001)
	var ids []string
	for range 3 {
		d, err := lim.Allow(ctx, key, p, 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, d.ID)
	}
	before := members(t, c, key, p)
	w, err := lim.Window(ctx, key, p)
	if err != nil {
		t.Fatal(err)
	}
	if w.Count != 3 || w.Limit != 5 || w.WindowMs != 10_000 || w.Truncated || len(w.Entries) != 3 {
		t.Fatalf("window %+v", w)
	}
	var got []string
	for i, e := range w.Entries {
		got = append(got, e.ID)
		if i > 0 && e.Ms < w.Entries[i-1].Ms {
			t.Fatalf("entries not oldest first: %+v", w.Entries)
		}
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("entries %v, want the recorded ids %v", got, ids)
	}
	if w.NowMs < t0 || w.Rules[0].OldestMs != w.Entries[0].Ms {
		t.Fatalf("window %+v", w)
	}
	if after := members(t, c, key, p); !slices.Equal(before, after) {
		t.Fatal("Window changed the log")
	}
	if err := lim.Reset(ctx, key, p); err != nil {
		t.Fatal(err)
	}
	w, err = lim.Window(ctx, key, p)
	if err != nil || w.Count != 0 || len(w.Entries) != 0 || w.Rules[0].OldestMs != -1 {
		t.Fatalf("after reset: %+v %v", w, err)
	}
}

func TestWindowTruncates(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	lim := limiter.New(c)
	p := mustPolicy(t, "wide=100000/1h")
	key := uniqueKey(t)
	t0 := redisNow(t, c)
	scores := make([]int64, limiter.MaxSnapshot+5)
	for i := range scores {
		scores[i] = t0 - 60_000 + int64(i)
	}
	seed(t, c, key, p, scores...)
	w, err := lim.Window(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Truncated || w.Count != len(scores) || len(w.Entries) != limiter.MaxSnapshot || w.Entries[0].Ms != scores[0] {
		t.Fatalf("truncated=%v count=%d entries=%d", w.Truncated, w.Count, len(w.Entries))
	}
}

func TestInvalidKey(t *testing.T) {
	lim := limiter.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	p := mustPolicy(t, "demo=5/10s")
	for _, k := range []string{"", "a b", "x{y}", strings.Repeat("a", 129), "é"} {
		if _, err := lim.Allow(context.Background(), k, p, 1); err != limiter.ErrInvalidKey {
			t.Errorf("key %q: err = %v", k, err)
		}
	}
}

// TestClusterExact runs the exactness check on a real three-node cluster (the
// embedded Redis has no cluster mode: skipped without redis-server).
func TestClusterExact(t *testing.T) {
	cl := redistest.StartCluster(t)
	client := cl.Client()
	p := mustPolicy(t, "burst=37/1m")
	lim := limiter.New(client)
	for run := range 3 {
		key := fmt.Sprintf("%s-%d", uniqueKey(t), run)
		var wg sync.WaitGroup
		var mu sync.Mutex
		allowed := 0
		for range 300 {
			wg.Go(func() {
				d, err := lim.Allow(context.Background(), key, p, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if allowed != 37 {
			t.Fatalf("run %d: allowed %d, want 37", run, allowed)
		}
	}
}

// TestBatchedExactness: only batched limiters, small batches and many
// pipelines in flight, still exactly the limit.
func TestBatchedExactness(t *testing.T) {
	url := redistest.URL(t)
	p := mustPolicy(t, "burst=37/1m")
	for _, opt := range []limiter.Option{limiter.WithBatching(1, 8), limiter.WithBatching(7, 3), limiter.WithBatching(500, 1)} {
		lim := limiter.New(newClient(t, url), opt)
		for run := range 5 {
			key := fmt.Sprintf("%s-%d", uniqueKey(t), run)
			var wg sync.WaitGroup
			var mu sync.Mutex
			allowed := 0
			for range 500 {
				wg.Go(func() {
					d, err := lim.Allow(context.Background(), key, p, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						allowed++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if allowed != 37 {
				t.Fatalf("run %d: allowed %d, want 37", run, allowed)
			}
		}
	}
}

// TestScriptCacheFlushed: after SCRIPT FLUSH (as after a Redis restart) both
// modes fall back to sending the script, whichever algorithm's it is, and
// count each request once.
func TestScriptCacheFlushed(t *testing.T) {
	c := newClient(t, redistest.URL(t))
	for _, alg := range algorithms {
		p := mustPolicy(t, "demo=5/1h@"+string(alg))
		for _, lim := range []*limiter.Limiter{limiter.New(c), limiter.New(c, limiter.WithoutBatching())} {
			key := uniqueKey(t)
			for i := 1; i <= 3; i++ {
				if err := c.ScriptFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				d, err := lim.Allow(context.Background(), key, p, 1)
				if err != nil || !d.Allowed || d.Bound().Count != i {
					t.Fatalf("%s: check %d after SCRIPT FLUSH: %+v %v", alg, i, d, err)
				}
			}
		}
	}
}

// TestBatchedTimeout: a check waits no longer than its context, even when its
// pipeline is stuck behind a Redis that stopped answering.
func TestBatchedTimeout(t *testing.T) {
	rs := redistest.StartProxy(t, redistest.URL(t))
	c := newClient(t, rs.URL)
	lim := limiter.New(c)
	p := mustPolicy(t, "demo=5/10s")
	if _, err := lim.Allow(context.Background(), "warm", p, 1); err != nil {
		t.Fatal(err)
	}
	rs.Pause()
	defer rs.Resume()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			timeout := time.Duration(50+10*i) * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			_, err := lim.Allow(ctx, "k", p, 1)
			if err == nil {
				t.Error("a check succeeded against a paused Redis")
			}
			if took := time.Since(start); took > timeout+time.Second {
				t.Errorf("check with timeout %v took %v", timeout, took)
			}
		})
	}
	wg.Wait()
}

// algorithms names every algorithm, the log first.
var algorithms = func() []limiter.Algorithm {
	var out []limiter.Algorithm
	for _, d := range limiter.Algorithms() {
		out = append(out, d.Name)
	}
	return out
}()

// stateKey is where key's state under p lives.
func stateKey(key string, p limiter.Policy) string {
	return redisdata.StateKey(key, p.Name, string(p.AlgorithmName()))
}

// maxLimit is the largest limit a rule of a may have.
func maxLimit(a limiter.Algorithm) int {
	d, _ := limiter.Describe(a)
	return d.MaxLimit
}
