package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
	"github.com/ratescope/ratescope/limiter"
)

// replicated starts a master and a replica that replicates through a proxy
// the test can pause, and returns clients of both and the proxy.
func replicated(t *testing.T) (master, replica *redis.Client, link *redistest.Proxy) {
	t.Helper()
	m := redistest.Start(t)
	link = redistest.StartProxy(t, m.URL)
	host, port, _ := net.SplitHostPort(link.Addr)
	r, err := redistest.Launch(context.Background(), t.TempDir(), "--replicaof", host, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	master, replica = newClient(t, m.URL), newClient(t, r.URL)
	err = redistest.WaitReady(context.Background(), 10*time.Second, nil, func() error {
		info, err := replica.Info(context.Background(), "replication").Result()
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = errors.New("the replica is not in sync yet")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return master, replica, link
}

// TestDurableDecisions: with WithDurableReplicas(1), every allowed decision
// is on the replica by the time it is answered, batched or not; while the
// replica receives nothing, no check is answered allowed — each fails with
// ErrNotDurable within its deadline — and denials still stand.
func TestDurableDecisions(t *testing.T) {
	master, replica, link := replicated(t)
	p := mustPolicy(t, "durable=20/1m")
	for _, opts := range [][]limiter.Option{nil, {limiter.WithoutBatching()}} {
		lim := limiter.New(master, append(opts, limiter.WithDurableReplicas(1))...)
		keys := []string{uniqueKey(t), uniqueKey(t), uniqueKey(t)}
		var wg sync.WaitGroup
		var mu sync.Mutex
		allowed := 0
		for i := range 90 {
			wg.Go(func() {
				key := keys[i%len(keys)]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				d, err := lim.Allow(ctx, key, p, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					return
				}
				// Read the replica right after the answer, before anything else.
				if err := replica.ZScore(context.Background(), redisdata.LogKey(key, p.Name), d.ID).Err(); err != nil {
					t.Errorf("allowed %s, which the replica does not hold: %v", d.ID, err)
				}
				mu.Lock()
				allowed++
				mu.Unlock()
			})
		}
		wg.Wait()
		if allowed != 3*20 {
			t.Fatalf("allowed %d, want %d", allowed, 3*20)
		}

		link.Pause()
		fresh, full := uniqueKey(t), keys[0]
		// WAIT gives up at half the deadline, so its answer is back in time
		// even on a loaded machine under the race detector.
		for _, key := range []string{fresh, full} {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			d, err := lim.Allow(ctx, key, p, 1)
			cancel()
			took := time.Since(start)
			switch {
			case key == fresh && (err == nil || !errors.Is(err, limiter.ErrNotDurable)):
				t.Errorf("a check while the replica hears nothing: %+v, %v; want ErrNotDurable", d, err)
			case key == full && (err != nil || d.Allowed):
				t.Errorf("a check of a full window while the replica hears nothing: %+v, %v; want a denial", d, err)
			case took > 2*time.Second+time.Second:
				t.Errorf("the check took %v, its deadline was 2s", took)
			}
		}
		link.Resume()
	}
}

// TestDurableCluster: on a cluster, WAIT goes to the node that ran the
// script, so a key whose shard's replica is paused cannot be allowed while
// keys on the other shards are.
func TestDurableCluster(t *testing.T) {
	cl := redistest.StartClusterWithReplicas(t)
	client := cl.Client()
	ctx := context.Background()
	p := mustPolicy(t, "durable=10/1m")
	lim := limiter.New(client, limiter.WithDurableReplicas(1))

	// One key per shard, found by the master that holds it.
	byMaster := map[string]string{}
	for i := 0; len(byMaster) < 3 && i < 1000; i++ {
		key := fmt.Sprintf("%s-%d", uniqueKey(t), i)
		node, err := client.MasterForKey(ctx, redisdata.LogKey(key, p.Name))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := byMaster[node.Options().Addr]; !ok {
			byMaster[node.Options().Addr] = key
		}
	}
	var pausedMaster string
	for m := range byMaster {
		pausedMaster = m
		break
	}
	cl.PauseReplicaOf(pausedMaster)
	for m, key := range byMaster {
		for range 3 {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			d, err := lim.Allow(cctx, key, p, 1)
			cancel()
			if m == pausedMaster {
				if !errors.Is(err, limiter.ErrNotDurable) {
					t.Fatalf("a key on the shard whose replica is paused: %+v, %v; want ErrNotDurable", d, err)
				}
			} else if err != nil || !d.Allowed {
				t.Fatalf("a key on a healthy shard (%s): %+v, %v", m, d, err)
			}
		}
	}
}
