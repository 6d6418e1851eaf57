package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Questions to a Deployment's nodes and sentinels, asked while it starts and
// by the tests that watch it fail over.

// ScriptCalls is how many scripts (EVAL, EVALSHA) clients sent the node at
// addr since it started. A replica counts none for what its master sends it:
// Redis replicates a script as its effects.
func ScriptCalls(ctx context.Context, addr string) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	stats, err := c.InfoMap(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("failed to read %s's command stats: %w", addr, err)
	}
	var n int64
	for name, v := range stats["Commandstats"] {
		if name == "cmdstat_eval" || name == "cmdstat_evalsha" {
			var calls int64
			if _, err := fmt.Sscanf(v, "calls=%d", &calls); err != nil {
				return 0, fmt.Errorf("failed to read %s of %s: %q", name, addr, v)
			}
			n += calls
		}
	}
	return n, nil
}

func configSet(ctx context.Context, addr, name, value string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if err := c.ConfigSet(ctx, name, value).Err(); err != nil {
		return fmt.Errorf("failed to set %s on %s: %w", name, addr, err)
	}
	return nil
}

// inSync: the master at addr has n replicas online.
func inSync(ctx context.Context, addr string, n int) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if got := strings.Count(info, ",state=online,"); got < n {
		return fmt.Errorf("%d of %d replicas online", got, n)
	}
	return nil
}

// knowsAll: the sentinel at addr knows every replica, connected, and every
// other sentinel — what it needs to agree on a failover and carry it out.
func knowsAll(ctx context.Context, addr string, cfg DeploymentConfig) error {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	replicas, err := c.Replicas(ctx, MasterName).Result()
	if err != nil {
		return err
	}
	up := 0
	for _, r := range replicas {
		if !strings.Contains(r["flags"], "disconnected") && !strings.Contains(r["flags"], "_down") {
			up++
		}
	}
	if up < cfg.Replicas {
		return fmt.Errorf("knows %d of %d replicas", up, cfg.Replicas)
	}
	others, err := c.Sentinels(ctx, MasterName).Result()
	if err != nil {
		return err
	}
	if len(others) < cfg.Sentinels-1 {
		return fmt.Errorf("knows %d of %d other sentinels", len(others), cfg.Sentinels-1)
	}
	return nil
}

func masterOf(ctx context.Context, sentinel string) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: sentinel, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	hp, err := c.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// isMaster: the node at addr answers ROLE as a master.
func isMaster(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return err
	}
	if len(role) == 0 || role[0] != "master" {
		return fmt.Errorf("%s is a %v", addr, role)
	}
	return nil
}
