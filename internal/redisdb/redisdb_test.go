package redisdb

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestChannel(t *testing.T) {
	db1 := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DB: 1})
	defer db1.Close()
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, DB: 3})
	defer failover.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	for _, c := range []struct {
		rdb  any
		want string
	}{
		{redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), "x:db0"},
		{db1, "x:db1"},
		{failover, "x:db3"},
		{cluster, "x:db0"},
		{nil, "x:db0"},
	} {
		if got := Channel("x", c.rdb); got != c.want {
			t.Errorf("Channel(%T) = %q, want %q", c.rdb, got, c.want)
		}
	}
}
