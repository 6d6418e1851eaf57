package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/limiter"
)

// The memory phase (--memory) measures what ratescope's state costs Redis,
// for the sizing table of the operations guide: INFO memory's used_memory
// before and after filling many keys the way real traffic does (one
// Limiter.Allow or Acquire per entry), divided by the keys and the entries.
// A window's sorted set changes its encoding past zset-max-listpack-entries
// (128 by default): below it the entries sit packed in one allocation, above
// it each has its own skiplist node and hash-table slot — the table shows
// both sides. Every key the phase writes is deleted after it.

// memorySize is one row of the table: keys holding entries each.
type memorySize struct {
	entries int
	keys    int64
}

// memoryWindowSizes spread about 100,000 entries over the keys of each row.
var memoryWindowSizes = []memorySize{{1, 50_000}, {10, 10_000}, {100, 1_000}, {128, 800}, {129, 800}, {1000, 100}}

// memoryLeaseSizes are the leases held per key in the lease rows.
var memoryLeaseSizes = []memorySize{{1, 20_000}, {4, 5_000}, {100, 500}}

func measureMemory(ctx context.Context, e *env) error {
	rdb, err := e.redisClient(algoWorkers)
	if err != nil {
		return err
	}
	defer rdb.Close()
	lim := limiter.New(rdb, limiter.WithDenyCache(0))
	listpack := "?"
	if v, err := rdb.ConfigGet(ctx, "zset-max-listpack-entries").Result(); err == nil {
		listpack = v["zset-max-listpack-entries"]
	}
	tag := uuid.NewString()[:4] // this run's keys alone
	window, err := limiter.ParsePolicy("mem" + tag + "=100000/1h")
	if err != nil {
		return err
	}
	lease, err := limiter.ParsePolicy("lease" + tag + "=1000/inflight+lease=1h")
	if err != nil {
		return err
	}
	// Load the scripts and settle the allocator, outside the measure.
	if _, err := lim.Allow(ctx, "warm", window, 1); err != nil {
		return err
	}
	if _, err := lim.Acquire(ctx, "warm", lease); err != nil {
		return err
	}
	defer rdb.Unlink(context.WithoutCancel(ctx), redisdata.LogKey("warm", window.Name), redisdata.LogKey("warm", lease.Name))

	r := e.rep
	r.line("")
	r.line("## Redis memory per key and per entry")
	r.line("")
	r.line("Each row fills its keys as traffic does — one check (or acquire) per entry, each entry a 36-byte id scored by Redis's clock — and reads INFO memory's used_memory before and after (zset-max-listpack-entries: %s). Keys are deleted between rows.", listpack)
	r.line("")
	r.line("| state | entries per key | keys | bytes per key | bytes per entry | MEMORY USAGE of one key |")
	r.line("|---|---:|---:|---:|---:|---:|")
	row := func(what string, s memorySize, fill func(key string) error, name func(key string) string) error {
		key := func(i int64) string { return "m" + tag + ":" + strconv.FormatInt(i, 10) }
		defer func() { _ = unlinkMemoryKeys(context.WithoutCancel(ctx), rdb, s.keys, key, name) }()
		before, _, err := usedMemory(ctx, rdb)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := forN(ctx, s.keys*int64(s.entries), func(i int64) error {
			return fill(key(i % s.keys))
		}); err != nil {
			return err
		}
		after, _, err := usedMemory(ctx, rdb)
		if err != nil {
			return err
		}
		usage, err := rdb.MemoryUsage(ctx, name(key(0)), 0).Result()
		if err != nil {
			return fmt.Errorf("failed to read MEMORY USAGE: %w", err)
		}
		perKey := float64(after-before) / float64(s.keys)
		r.line("| %s | %d | %d | %.0f | %.1f | %d |", what, s.entries, s.keys, perKey, perKey/float64(s.entries), usage)
		progress("memory: %s × %d in %s", what, s.entries, time.Since(start).Round(time.Millisecond))
		return nil
	}
	for _, s := range memoryWindowSizes {
		err := row("window (log)", s, func(k string) error {
			d, err := lim.Allow(ctx, k, window, 1)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("a check of %s was denied", k)
			}
			return err
		}, func(k string) string { return redisdata.LogKey(k, window.Name) })
		if err != nil {
			return err
		}
	}
	for _, s := range memoryLeaseSizes {
		err := row("leases (inflight)", s, func(k string) error {
			l, err := lim.Acquire(ctx, k, lease)
			if err == nil && !l.Held {
				err = fmt.Errorf("an acquire of %s was refused", k)
			}
			return err
		}, func(k string) string { return redisdata.LogKey(k, lease.Name) })
		if err != nil {
			return err
		}
	}
	r.line("")
	r.line("A calendar quota is one counter per key and period: see the quota-memory phase (`--quota-memory`).")
	return nil
}

// unlinkMemoryKeys deletes the n keys a row wrote, at once.
func unlinkMemoryKeys(ctx context.Context, rdb *redis.Client, n int64, key func(int64) string, name func(string) string) error {
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.Del(ctx, name(key(i))) // DEL, not UNLINK: the memory is freed before the next row reads
		if pipe.Len() >= 1000 || i == n-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				return fmt.Errorf("failed to delete the measured keys: %w", err)
			}
		}
	}
	return nil
}
