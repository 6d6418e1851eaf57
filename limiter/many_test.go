package limiter_test

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// TestCheckManyAgainstDefinition runs random batches of check calls — up to
// eight, on up to three logs, so later calls see what earlier ones recorded;
// half of them of one policy, cost and bound, so only the ids differ — as one
// call of the check script's many variant, laid out as the batcher lays it, and holds every reply,
// and each log left behind, to the definition applied call after call at the
// batch's one now, as if they were separate calls in that order.
func TestCheckManyAgainstDefinition(t *testing.T) {
	for _, mode := range []struct{ name, url string }{
		{"redis", redistest.URL(t)},
		{"embedded", redistest.EmbeddedURL(t)},
	} {
		t.Run(mode.name, func(t *testing.T) {
			c := newClient(t, mode.url)
			many := redis.NewScript(limiter.ManySource(redisdata.CheckScript))
			rng := rand.New(rand.NewPCG(35, 1))
			for i := range 150 {
				checkMany(t, c, many, rng, i)
			}
		})
	}
}

func checkMany(t *testing.T, c *redis.Client, many *redis.Script, rng *rand.Rand, i int) {
	t.Helper()
	ctx := context.Background()
	clock, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	logs := make([]string, 1+rng.IntN(3))
	for j := range logs {
		logs[j] = redisdata.LogKey(uniqueKey(t), "p")
		var zs []redis.Z
		for _, off := range randomCall(rng).offsets {
			zs = append(zs, redis.Z{Score: float64(clock.UnixMilli() + off), Member: uuid.NewString()})
		}
		if len(zs) > 0 {
			if err := c.ZAdd(ctx, logs[j], zs...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	state := map[string][]redis.Z{}
	for _, k := range logs {
		if state[k], err = c.ZRangeWithScores(ctx, k, 0, -1).Result(); err != nil {
			t.Fatal(err)
		}
	}
	n := 1 + rng.IntN(8)
	calls := make([]scriptCall, n)
	on := make([]string, n)
	members := make([]string, n)
	keys := make([][]string, n)
	args := make([][]any, n)
	alike := rng.IntN(2) == 0 // one policy, cost and bound for all: only the ids differ
	for j := range calls {
		calls[j], on[j], members[j] = randomCall(rng), logs[rng.IntN(len(logs))], uuid.NewString()
		if alike && j > 0 {
			calls[j].rules, calls[j].cost, calls[j].maxEvict, calls[j].peek = calls[0].rules, calls[0].cost, calls[0].maxEvict, calls[0].peek
		}
		if calls[j].peek {
			members[j] = ""
		}
		a := []any{calls[j].cost, members[j], calls[j].maxEvict}
		for _, r := range calls[j].rules {
			a = append(a, r[0], r[1])
		}
		keys[j], args[j] = []string{on[j]}, a
	}
	flatKeys, flatArgs := limiter.ManyArgs(keys, args)
	raw, err := many.Run(ctx, c, flatKeys, flatArgs...).Slice()
	if err != nil || len(raw) != n {
		t.Fatalf("batch %d: %v, %d replies for %d calls", i, err, len(raw), n)
	}
	var now int64
	for j, sc := range calls {
		vs, _ := raw[j].([]any)
		got := make([]int64, len(vs))
		for x, v := range vs {
			got[x], _ = v.(int64)
		}
		if len(got) < 2 {
			t.Fatalf("batch %d call %d: reply %v", i, j, raw[j])
		}
		if j == 0 {
			now = got[1]
		} else if got[1] != now {
			t.Fatalf("batch %d call %d: now %d, the batch's first read %d", i, j, got[1], now)
		}
		want, left := definition(sc, state[on[j]], now, members[j])
		if !slices.Equal(got, want) {
			t.Fatalf("batch %d call %d %+v:\nreply %v\nwant  %v", i, j, sc, got, want)
		}
		slices.SortFunc(left, func(a, b redis.Z) int {
			return cmp.Or(cmp.Compare(a.Score, b.Score), strings.Compare(a.Member.(string), b.Member.(string)))
		})
		state[on[j]] = left
	}
	for _, k := range logs {
		after, err := c.ZRangeWithScores(ctx, k, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if a, l := describe(after), describe(state[k]); a != l {
			t.Fatalf("batch %d: the log %s after\n%s\nwant\n%s", i, k, a, l)
		}
	}
}

// TestCheckManyKeepsAnErrorToItsCall: a call of a batch on a key of another
// type fails alone; the calls before and after it are decided and recorded.
func TestCheckManyKeepsAnErrorToItsCall(t *testing.T) {
	for _, mode := range []struct{ name, url string }{
		{"redis", redistest.URL(t)},
		{"embedded", redistest.EmbeddedURL(t)},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			c := newClient(t, mode.url)
			many := redis.NewScript(limiter.ManySource(redisdata.CheckScript))
			good, bad := redisdata.LogKey(uniqueKey(t), "p"), redisdata.LogKey(uniqueKey(t), "p")
			if err := c.Set(ctx, bad, "not a log", 0).Err(); err != nil {
				t.Fatal(err)
			}
			one := func(m string) []any { return []any{1, m, 1000, 10, 60000} }
			keys, args := limiter.ManyArgs([][]string{{good}, {bad}, {good}}, [][]any{one("a"), one("b"), one("c")})
			raw, err := many.Run(ctx, c, keys, args...).Slice()
			if err != nil || len(raw) != 3 {
				t.Fatalf("the batch: %v, %v", raw, err)
			}
			var rerr redis.Error
			if !errors.As(asError(raw[1]), &rerr) || !strings.Contains(rerr.Error(), "WRONGTYPE") {
				t.Errorf("the call on a string: %#v, want its WRONGTYPE error", raw[1])
			}
			for _, j := range []int{0, 2} {
				if vs, ok := raw[j].([]any); !ok || len(vs) < 2 || vs[0] != int64(1) {
					t.Errorf("call %d: %#v, want allowed", j, raw[j])
				}
			}
			if n, err := c.ZCard(ctx, good).Result(); err != nil || n != 2 {
				t.Errorf("the good log holds %d entries (%v), want 2", n, err)
			}
		})
	}
}

func asError(v any) error {
	err, _ := v.(error)
	return err
}

// TestBatchedChecksShareScriptCalls: concurrent checks queued behind a
// pipeline in flight go to Redis as fewer script calls than checks, and the
// limit holds exactly across them.
func TestBatchedChecksShareScriptCalls(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, redistest.URL(t))
	l := limiter.New(c, limiter.WithBatching(64, 1))
	p := mustPolicy(t, "shared=100/1m")
	key := uniqueKey(t)
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 300 {
		wg.Go(func() {
			d, err := l.Allow(ctx, key, p, 1)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if d.Allowed {
				allowed++
			}
		})
	}
	wg.Wait()
	if allowed != 100 {
		t.Errorf("%d of 300 checks allowed, want exactly 100", allowed)
	}
	calls := scriptCalls(t, c)
	t.Logf("300 checks in %d script calls", calls)
	if calls >= 300 {
		t.Errorf("300 checks took %d script calls; queued checks should share them", calls)
	}
}

// scriptCalls is how many EVALSHA and EVAL calls Redis ran.
func scriptCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(info) {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				v, _, _ := strings.Cut(rest, ",")
				x, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("commandstats: %q", line)
				}
				n += x
			}
		}
	}
	return n
}
