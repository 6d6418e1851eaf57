package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
)

// The quota-memory phase (--quota-memory) measures what a calendar quota
// costs Redis per client: --quota-keys client keys (user:<n>) are checked
// once each, through the limiter, on a policy of one month quota, and INFO
// memory's used_memory before and after, divided by the keys, is the cost
// of one client's month — the counter, its name, its expiry and its share
// of the keyspace's hash tables. A month of 100,000 requests kept as a log
// would be 100,000 sorted-set entries; a quota keeps one number. The
// policy's name is drawn at random, so the keys are this run's alone.
const quotaMemoryRule = "100000/month"

// quotaMemoryBound is the most a client's month quota may cost, in bytes.
const quotaMemoryBound = 150

func measureQuotaMemory(ctx context.Context, e *env) error {
	rdb, err := e.redisClient(algoWorkers)
	if err != nil {
		return err
	}
	defer rdb.Close()
	lim := limiter.New(rdb, limiter.WithDenyCache(0))
	p, err := limiter.ParsePolicy("q" + uuid.NewString()[:2] + "=" + quotaMemoryRule)
	if err != nil {
		return err
	}
	n := int64(e.o.quotaKeys)
	const prefix = "user:"
	key := func(i int64) string { return prefix + strconv.FormatInt(i, 10) }
	// Load the script and settle the allocator, outside the measure.
	if _, err := lim.Allow(ctx, prefix+"warm", p, 1); err != nil {
		return err
	}
	defer func() { _ = unlinkQuotas(context.WithoutCancel(ctx), rdb, p, key, n+1) }()
	before, keysBefore, err := usedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := forN(ctx, n, func(i int64) error {
		d, err := lim.Allow(ctx, key(i), p, 1)
		if err == nil && !d.Allowed {
			err = fmt.Errorf("the first check of %s was denied", key(i))
		}
		return err
	}); err != nil {
		return err
	}
	took := time.Since(start)
	after, keysAfter, err := usedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	w, err := lim.Window(ctx, key(0), p)
	if err != nil {
		return err
	}
	periodStart := w.NowMs + w.Rules[0].ResetMs - w.Rules[0].PeriodMs
	name := redisdata.QuotaKey(key(0), p.Name, "", periodStart) // a policy's only quota
	usage, err := rdb.MemoryUsage(ctx, name, 0).Result()
	if err != nil {
		return fmt.Errorf("failed to read MEMORY USAGE of %s: %w", name, err)
	}
	perKey := float64(after-before) / float64(n)
	r := e.rep
	r.line("")
	r.line("## Calendar quotas: memory per client")
	r.line("")
	r.line("`%s` (the log; a policy of quotas alone keeps no window state), %d client keys (`%s<n>`) checked once each in %s (%.0f checks/s): INFO memory's used_memory grew by %d bytes, %d keys were added.",
		p, n, prefix, took.Round(time.Millisecond), float64(n)/took.Seconds(), after-before, keysAfter-keysBefore)
	r.line("")
	r.line("- **%.1f bytes of Redis memory per client's month quota** (bound: %d) — one string key per client and period, e.g. `%s` (%d bytes long), whose MEMORY USAGE says %d", perKey, quotaMemoryBound, name, len(name), usage)
	if perKey > quotaMemoryBound {
		return fmt.Errorf("a month quota costs %.1f bytes a client, more than %d", perKey, quotaMemoryBound)
	}
	return nil
}

// unlinkQuotas deletes the month counters of key(0) … key(n-2) and of the
// warm-up's key under p: every key the phase wrote.
func unlinkQuotas(ctx context.Context, rdb *redis.Client, p limiter.Policy, key func(int64) string, n int64) error {
	start, _ := limiter.Month.Bounds(time.Now(), time.UTC)
	for _, s := range []time.Time{start, start.AddDate(0, -1, 0), start.AddDate(0, 1, 0)} { // whichever Redis's clock was in
		pipe := rdb.Pipeline()
		for i := range n {
			k := key(i)
			if i == n-1 {
				k = "user:warm"
			}
			pipe.Unlink(ctx, redisdata.QuotaKey(k, p.Name, "", s.UnixMilli()))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("failed to delete the measured keys: %w", err)
		}
	}
	return nil
}

// usedMemory reads INFO memory's used_memory and the keys of the database.
func usedMemory(ctx context.Context, rdb *redis.Client) (bytes, keys int64, err error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("failed to read INFO memory: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			bytes, err = strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, 0, fmt.Errorf("failed to read used_memory %q: %w", v, err)
			}
		}
	}
	if keys, err = rdb.DBSize(ctx).Result(); err != nil {
		return 0, 0, fmt.Errorf("failed to read DBSIZE: %w", err)
	}
	return bytes, keys, nil
}
