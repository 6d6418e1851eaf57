package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds the wait for cluster_state:ok after the nodes joined.
const clusterTimeout = 30 * time.Second

// LaunchCluster starts three cluster-enabled redis-servers (masters only) with
// their files in folders below dir, joins them with redis-cli --cluster create
// and waits for cluster_state:ok. On error, whatever started is stopped.
func LaunchCluster(ctx context.Context, dir string) (nodes []*Process, err error) {
	return launchCluster(ctx, dir, 0)
}

// launchCluster starts three masters with replicas replicas each.
func launchCluster(ctx context.Context, dir string, replicas int) (nodes []*Process, err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("failed to find redis-server on PATH (%s): %w", InstallHint("redis-server"), err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("failed to find redis-cli on PATH (%s): %w", InstallHint("redis-cli"), err)
	}
	defer func() {
		if err != nil {
			StopAll(nodes)
		}
	}()
	var addrs []string
	for i := range 3 * (1 + replicas) {
		nodeDir := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return nodes, fmt.Errorf("failed to create a cluster node's folder: %w", err)
		}
		n, err := launchOnFreePort(ctx, &Process{bin: bin, dir: nodeDir, args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		}}, true)
		if err != nil {
			return nodes, err
		}
		nodes = append(nodes, n)
		addrs = append(addrs, n.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nodes, fmt.Errorf("failed to create the cluster: %w\n%s", err, out)
	}
	if err := WaitReady(ctx, clusterTimeout, nil, func() error { return clusterOK(ctx, addrs, replicas) }); err != nil {
		return nodes, fmt.Errorf("failed to reach cluster_state:ok: %w", err)
	}
	return nodes, nil
}

func clusterOK(ctx context.Context, addrs []string, replicas int) error {
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && replicas > 0 {
			// Each master has its replicas online, so WAIT can count them.
			var role string
			if role, err = c.Info(ctx, "replication").Result(); err == nil &&
				strings.Contains(role, "role:master") && strings.Count(role, ",state=online,") < replicas {
				err = fmt.Errorf("%s has not all its replicas in sync yet", addr)
			}
		}
		_ = c.Close()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s is not ok yet", addr)
		}
	}
	return nil
}

// ReplicaOf is the node that replicates the cluster master at addr.
func ReplicaOf(ctx context.Context, nodes []*Process, master string) (*Process, error) {
	c := redis.NewClient(&redis.Options{Addr: master})
	defer c.Close()
	out, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("failed to read the cluster's nodes: %w", err)
	}
	var masterID string
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && strings.HasPrefix(f[1], master+"@") {
			masterID = f[0]
		}
	}
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[3] == masterID && masterID != "" {
			addr, _, _ := strings.Cut(f[1], "@")
			for _, n := range nodes {
				if n.Addr == addr {
					return n, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no node replicates %s", master)
}

// ClusterURL is the form ratescope's REDIS_URL takes for a cluster:
// redis://h1:p1?addr=h2:p2&addr=h3:p3
func ClusterURL(addrs []string) string {
	u := "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		if i == 0 {
			u += "?addr=" + a
		} else {
			u += "&addr=" + a
		}
	}
	return u
}

// StopAll stops every process.
func StopAll(ps []*Process) {
	for _, p := range ps {
		p.Stop()
	}
}
