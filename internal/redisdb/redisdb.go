// Package redisdb scopes ratescope's Pub/Sub channels to the Redis database
// a client selects. Keys live in one database, but Pub/Sub spans every
// database of a server: without the number in the channel, deployments on
// databases 0 and 1 of one Redis would hear each other's decisions, resets
// and viewer counts, and one's resets would clear the other's deny cache.
package redisdb

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// DB is the database number rdb selects: a Client's (a Sentinel failover
// client is one too), and 0 for anything else — a cluster has only
// database 0.
func DB(rdb any) int {
	if c, ok := rdb.(interface{ Options() *redis.Options }); ok {
		return c.Options().DB
	}
	return 0
}

// Channel is the Pub/Sub channel name for rdb's database: "<name>:db<N>".
func Channel(name string, rdb any) string { return name + ":db" + strconv.Itoa(DB(rdb)) }
