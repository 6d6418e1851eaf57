package limiter

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
)

// The algorithms a policy may choose with @ALGORITHM (SPEC §8).
const (
	// Log is the sliding-window log: one sorted-set entry per allowed request,
	// exact over any window. The default.
	Log = "log"
	// Fixed counts requests per window aligned to multiples of the window
	// on Redis's clock; a burst straddling a boundary may pass twice.
	Fixed = "fixed"
	// Counter is the sliding-window counter: the previous aligned window's
	// count, weighted by how much of it still overlaps, plus the current one.
	Counter = "counter"
	// GCRA is the generic cell rate algorithm as go-redis/redis_rate runs
	// it: one theoretical arrival time, emission interval window/limit,
	// burst limit.
	GCRA = "gcra"
	// Bucket is a token bucket of capacity limit refilled continuously at
	// limit per window. It decides exactly as GCRA does (they are the same
	// algorithm) and differs in what it stores.
	Bucket = "bucket"
)

// Algorithms lists every algorithm, in SPEC §8's order.
var Algorithms = []string{Log, Fixed, Counter, GCRA, Bucket}

// algorithm is the seam between the Limiter and how one algorithm keeps its
// windows in Redis. Two implementations: the log (entries in a sorted set) and
// stateAlgorithm (a few numbers per rule in a hash), which fixed, counter, gcra
// and bucket share, each with its own script.
type algorithm interface {
	// allow decides one request of cost >= 1 (>= 0 for a peek, which
	// records nothing) for a valid key. When denied it also returns, per
	// rule, the wait until a request of cost 1 would fit (0 where one fits
	// now): what the local deny cache needs.
	allow(ctx context.Context, l *Limiter, key string, p Policy, cost int, peek bool) (Decision, []int64, error)
	// prepare builds the script call that allow sends, so several can share
	// one round trip (AllowEach).
	prepare(key string, p Policy, cost int, peek bool) prepared
	// window describes the state without consuming anything.
	window(ctx context.Context, l *Limiter, key string, p Policy) (Window, error)
}

// algorithmOf returns p's algorithm; an unknown name (a Policy built by hand)
// falls back to the log, as an empty one does.
func algorithmOf(p Policy) algorithm {
	switch p.AlgorithmName() {
	case Fixed:
		return fixedAlgorithm
	case Counter:
		return counterAlgorithm
	case GCRA:
		return gcraAlgorithm
	case Bucket:
		return bucketAlgorithm
	}
	return logAlgorithm{}
}

// AlgorithmKey is where the state of key under the named policy and algorithm
// lives: RedisKey(key, policy) for the log, rate_limit:{<key>}:<policy>:<algorithm>
// (a hash, one field per rule) for the others. The client key is the hash
// tag, so all of one client's keys share a cluster slot.
func AlgorithmKey(key, policy, algorithm string) string {
	if algorithm == Log || algorithm == "" {
		return RedisKey(key, policy)
	}
	return RedisKey(key, policy) + ":" + algorithm
}

// StateKey is where key's state under p lives.
func StateKey(key string, p Policy) string { return AlgorithmKey(key, p.Name, p.AlgorithmName()) }

// allStateKeys are the keys of every algorithm for key under policy: a reset
// clears them all, so a policy whose algorithm was changed by a reload cannot
// find stale state if it is changed back.
func allStateKeys(key, policy string) []string {
	keys := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		keys[i] = AlgorithmKey(key, policy, a)
	}
	return keys
}

// knownAlgorithm reports whether name is one of Algorithms.
func knownAlgorithm(name string) bool { return slices.Contains(Algorithms, name) }

// prepared is one decision script call, ready to send, and how to read its
// reply into a Decision (and, when denied, each rule's wait for cost 1).
type prepared struct {
	script *redis.Script
	key    string
	args   []any
	decide func(res []int64) (Decision, []int64, error)
}
