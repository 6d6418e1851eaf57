package limiter_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
)

// TestCheckScriptAgainstDefinition runs the log's check script on random logs
// — entries inside and outside every window, expired backlogs smaller and
// larger than the eviction bound, ties, one to three rules, costs, peeks —
// and holds every reply, and the log left behind, to SPEC §2's definition
// computed in Go from the seeded scores and the script's own nowMs: counts,
// oldest scores, exact retry times, bounded eviction of the oldest expired
// entries, the entries an allowed request adds and its expiry. The script
// takes shortcuts (it reads the oldest entries once, counts by rank, evicts
// without counting); this is what keeps each of them exact.
func TestCheckScriptAgainstDefinition(t *testing.T) {
	for _, mode := range []struct{ name, url string }{
		{"redis", redistest.URL(t)},
		{"embedded", redistest.EmbeddedURL(t)},
	} {
		t.Run(mode.name, func(t *testing.T) {
			c := newClient(t, mode.url)
			script := redis.NewScript(redisdata.CheckScript)
			rng := rand.New(rand.NewPCG(21, 4))
			for i := range 400 {
				checkOnce(t, c, script, rng, i)
			}
		})
	}
}

// scriptCall is one random call: rules as (limit, windowMs), the seeded
// scores as offsets from Redis's clock, cost, eviction bound, peek.
type scriptCall struct {
	rules    [][2]int64
	offsets  []int64
	cost     int64
	maxEvict int64
	peek     bool
}

func randomCall(rng *rand.Rand) scriptCall {
	var sc scriptCall
	windows := []int64{1000, 2000, 5000, 10000}
	rng.Shuffle(len(windows), func(i, j int) { windows[i], windows[j] = windows[j], windows[i] })
	minLimit := int64(1 << 30)
	for _, w := range windows[:1+rng.IntN(3)] {
		l := 1 + rng.Int64N(12)
		sc.rules = append(sc.rules, [2]int64{l, w})
		minLimit = min(minLimit, l)
	}
	longest := int64(0)
	for _, r := range sc.rules {
		longest = max(longest, r[1])
	}
	// Entries anywhere from two longest windows ago to now, a few of them on
	// one millisecond; sometimes none, sometimes an expired backlog.
	n := []int{0, 1, 2, 3, 4, 5, 8, 15, 30}[rng.IntN(9)]
	for range n {
		off := -rng.Int64N(2 * longest)
		sc.offsets = append(sc.offsets, off)
		if rng.IntN(5) == 0 {
			sc.offsets = append(sc.offsets, off)
		}
	}
	if rng.IntN(4) == 0 {
		for range 3 + rng.IntN(20) {
			sc.offsets = append(sc.offsets, -longest-1-rng.Int64N(longest))
		}
	}
	sc.cost = 1 + rng.Int64N(minLimit)
	sc.maxEvict = []int64{1, 2, 3, 5, 1000}[rng.IntN(5)]
	sc.peek = rng.IntN(6) == 0
	if sc.peek && rng.IntN(2) == 0 {
		sc.cost = 0
	}
	return sc
}

func checkOnce(t *testing.T, c *redis.Client, script *redis.Script, rng *rand.Rand, i int) {
	t.Helper()
	ctx := context.Background()
	sc := randomCall(rng)
	key := redisdata.LogKey(uniqueKey(t), "p")
	clock, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.offsets) > 0 {
		zs := make([]redis.Z, len(sc.offsets))
		for j, off := range sc.offsets {
			zs[j] = redis.Z{Score: float64(clock.UnixMilli() + off), Member: uuid.NewString()}
		}
		if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	seeded, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	member := uuid.NewString()
	if sc.peek {
		member = ""
	}
	args := []any{sc.cost, member, sc.maxEvict}
	for _, r := range sc.rules {
		args = append(args, r[0], r[1])
	}
	got, err := script.Run(ctx, c, []string{key}, args...).Int64Slice()
	if err != nil {
		t.Fatalf("call %d %+v: %v", i, sc, err)
	}
	if len(got) < 2 {
		t.Fatalf("call %d: reply %v", i, got)
	}
	now := got[1]
	want, left := definition(sc, seeded, now, member)
	if !slices.Equal(got, want) {
		t.Fatalf("call %d %+v at now-%d:\nreply %v\nwant  %v", i, sc, now-clock.UnixMilli(), got, want)
	}
	after, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if a, l := describe(after), describe(left); a != l {
		t.Fatalf("call %d %+v: the log after\n%s\nwant\n%s", i, sc, a, l)
	}
	if got[0] == 1 && !sc.peek {
		longest := time.Duration(0)
		for _, r := range sc.rules {
			longest = max(longest, time.Duration(r[1])*time.Millisecond)
		}
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil || ttl <= longest-time.Second || ttl > longest {
			t.Fatalf("call %d: PTTL %v, %v; want the longest window, %v", i, ttl, err, longest)
		}
	}
}

// definition is what the script must answer and leave, from the seeded log
// (sorted as Redis sorts it) and the script's now.
func definition(sc scriptCall, seeded []redis.Z, now int64, member string) (reply []int64, left []redis.Z) {
	longest := int64(0)
	for _, r := range sc.rules {
		longest = max(longest, r[1])
	}
	expired := 0
	for _, z := range seeded {
		if int64(z.Score) <= now-longest {
			expired++
		}
	}
	left = slices.Clone(seeded[min(int64(expired), sc.maxEvict):])
	allowed := int64(1)
	reply = []int64{0, now}
	for _, r := range sc.rules {
		limit, w := r[0], r[1]
		var in []int64
		for _, z := range seeded {
			if int64(z.Score) > now-w {
				in = append(in, int64(z.Score))
			}
		}
		count := int64(len(in))
		oldest, retry, retry1 := int64(-1), int64(0), int64(0)
		if count > 0 {
			oldest = in[0]
		}
		if count+sc.cost > limit {
			allowed = 0
			retry = in[count+sc.cost-limit-1] + w - now
			if count+1 > limit {
				retry1 = in[count-limit] + w - now
			}
		}
		reply = append(reply, count, oldest, retry, retry1)
	}
	reply[0] = allowed
	if allowed == 1 && member != "" {
		for j := range sc.cost {
			m := member
			if j > 0 {
				m = fmt.Sprintf("%s:%d", member, j)
			}
			left = append(left, redis.Z{Score: float64(now), Member: m})
		}
	}
	return reply, left
}

// describe lists a log's entries as "score member" lines, sorted, so two
// logs compare whatever the order of equal scores.
func describe(zs []redis.Z) string {
	lines := make([]string, len(zs))
	for i, z := range zs {
		lines[i] = fmt.Sprintf("%d %v", int64(z.Score), z.Member)
	}
	slices.Sort(lines)
	return fmt.Sprint(lines)
}
