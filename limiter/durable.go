package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxDurableWait bounds WAIT for calls whose contexts have no deadline.
const MaxDurableWait = time.Second

// WithDurableReplicas makes an allowed decision wait until n replicas hold
// it: each pipeline of checks ends with WAIT n on the connection that ran
// its scripts (on a cluster, one pipeline per node holding the keys), for at
// most half the time left to the calls' earliest deadline. When fewer acknowledge in time, an allowed decision
// fails with an error that wraps ErrNotDurable (a denial, which records
// nothing, stands). Redis's replication is asynchronous: without this, a
// failover forgets the last decisions the master answered, and the requests
// they allowed may pass again. n = 0 (the default) waits for nothing.
//
// Batching keeps its throughput (one WAIT per pipeline, not per check); a
// check costs one replica round trip more. AllowEach does not wait.
func WithDurableReplicas(n int) Option {
	return func(l *Limiter) { l.replicas = max(0, n) }
}

// ErrNotDurable is wrapped by the error of an allowed decision that fewer
// replicas than WithDurableReplicas asks for acknowledged in time. The
// request was recorded on the master, but must not be answered as allowed: a
// failover could forget it. Its message starts as a Redis error would:
// "NOREPLICAS …".
var ErrNotDurable = errors.New("fewer replicas than required acknowledged the decision")

// replicaError is ErrNotDurable with the counts. It is a Redis error
// (RedisError), so whoever names Redis errors by their first word calls it
// "noreplicas", as Redis names a write refused by min-replicas-to-write.
type replicaError struct {
	want int
	got  int64
	err  error // WAIT's own error, if it failed
}

func (e *replicaError) Error() string {
	s := fmt.Sprintf("NOREPLICAS %d of %d replicas acknowledged the decision in time", e.got, e.want)
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

// RedisError marks it as an error Redis answered (go-redis's redis.Error).
func (*replicaError) RedisError() {}

func (e *replicaError) Is(target error) bool { return target == ErrNotDurable }

func (e *replicaError) Unwrap() error { return e.err }

// confirmed is nil when WAIT's answer says want replicas hold what its
// connection wrote before it.
func confirmed(want int, wait *redis.IntCmd) error {
	got, err := wait.Result()
	if err == nil && got >= int64(want) {
		return nil
	}
	return &replicaError{want: want, got: got, err: err}
}

// waitTimeout is WAIT's timeout for calls: half the time left to the
// earliest of their deadlines, at least 1 ms (0 would wait forever). A
// replica that answers at all answers in a round trip; the other half is
// for the answers to reach every caller in time, so a denial sharing the
// pipeline is answered as a denial even when WAIT gives up.
func waitTimeout(calls []*call) time.Duration {
	left := MaxDurableWait
	for _, c := range calls {
		if !c.deadline.IsZero() {
			left = min(left, time.Until(c.deadline)/2)
		}
	}
	return max(left, time.Millisecond)
}

// nodeFinder is a cluster client: the node that holds a key.
type nodeFinder interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// group is calls that go to one connection.
type group struct {
	rdb   pipeliner
	calls []*call
}

// byNode groups calls by the cluster node that holds their key when WAIT
// must follow them on the same connection, so WAIT asks that node's
// replicas; otherwise (not durable, or not a cluster) it returns nil: one
// pipeline that the client routes. A call whose node is unknown fails.
func (b *batcher) byNode(ctx context.Context, calls []*call) []group {
	f, ok := b.rdb.(nodeFinder)
	if b.replicas == 0 || !ok {
		return nil
	}
	groups := make([]group, 0, 4) // non-nil: calls whose node is unknown are not sent
	index := map[*redis.Client]int{}
	for _, c := range calls {
		node, err := f.MasterForKey(ctx, c.keys[0])
		if err != nil {
			c.finish(nil, fmt.Errorf("failed to find the cluster node of a key: %w", err))
			continue
		}
		i, seen := index[node]
		if !seen {
			i = len(groups)
			index[node] = i
			groups = append(groups, group{rdb: node})
		}
		groups[i].calls = append(groups[i].calls, c)
	}
	return groups
}
