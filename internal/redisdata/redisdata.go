// Package redisdata says where the limiter's state lives in Redis, once:
// the keys of a window, how many expired entries one check may evict, and
// the check script's source. The limiter, the race demo, the load tool and
// the page (through the server) read it here.
package redisdata

import "strconv"

// MaxEvict bounds how many expired entries one check removes from a log, so
// no call blocks Redis for long however large a log grew; counting never
// relies on eviction.
const MaxEvict = 1000

// LogKey is where the log of key under policy lives:
// rate_limit:{<key>}:<policy>. The braces are a hash tag, so every policy of
// one client shares a cluster slot.
func LogKey(key, policy string) string {
	return "rate_limit:{" + key + "}:" + policy
}

// StateKey is where key's state under policy lives for algorithm: the log's
// sorted set (LogKey) for "log" or "" — and for "inflight", whose leases
// live in that set too —, else a hash beside it,
// rate_limit:{<key>}:<policy>:<algorithm>, one field per rule.
func StateKey(key, policy, algorithm string) string {
	if algorithm == "log" || algorithm == "" || algorithm == "inflight" {
		return LogKey(key, policy)
	}
	return LogKey(key, policy) + ":" + algorithm
}

// LockKey is where the lockout of key under policy lives, beside its state:
// rate_limit:{<key>}:<policy>:lock, a hash of the lock's end and level.
func LockKey(key, policy string) string {
	return LogKey(key, policy) + ":lock"
}

// QuotaKey is where the counter of key's calendar quota under policy lives
// for the period starting at startMs (epoch ms):
// rate_limit:{<key>}:<policy>:q:<startMs>, e.g.
// rate_limit:{user:42}:api:q:1796083200000 — one string key per period,
// expiring after it. A policy with several quotas (a day's and a month's)
// names them by period ("day", "week" or "month"), whose initial follows
// the q: rate_limit:{user:42}:api:qm:1796083200000, as a day, a week and a
// month may start at the same instant. period is "" for a policy's only
// quota.
func QuotaKey(key, policy, period string, startMs int64) string {
	tag := ""
	if period != "" {
		tag = period[:1]
	}
	return LogKey(key, policy) + ":q" + tag + ":" + strconv.FormatInt(startMs, 10)
}

// The placeholders of KeyFormat and StateKeyFormat: characters no client
// key, policy or algorithm name holds.
const (
	KeyPlaceholder       = "<key>"
	PolicyPlaceholder    = "<policy>"
	AlgorithmPlaceholder = "<algorithm>"
)

// KeyFormat and StateKeyFormat are LogKey and StateKey with placeholders
// for the values: what a page fills in to name a window's key.
var (
	KeyFormat      = LogKey(KeyPlaceholder, PolicyPlaceholder)
	StateKeyFormat = StateKey(KeyPlaceholder, PolicyPlaceholder, AlgorithmPlaceholder)
)

// CheckScript is the log's check script (Lua), for tools that call it
// directly to measure what the limiter adds around it. Package limiter,
// which keeps the script beside its Go code, sets it when it loads.
var CheckScript string
