package livebus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/livebus"
)

// Example publishes a service's decisions to a ratescope page on the same
// Redis. Here the page's server is played by hand: it announces that
// someone watches policy login, key alice (as every ratescope instance does
// for its viewers about once a second) and reads what is published.
func Example() {
	mr, _ := miniredis.Run() // an in-process Redis for the example; use your own
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	ctx := context.Background()

	pub := livebus.NewPublisher(rdb, "checkout-1")
	go pub.Run(ctx)
	defer pub.Close()

	page := rdb.Subscribe(ctx, "ratescope:events:db0") // the bus of database 0
	defer page.Close()
	if _, err := page.Receive(ctx); err != nil { // subscribed
		panic(err)
	}
	login, _ := limiter.ParsePolicy("login=5/1m")
	d := limiter.Decision{Allowed: true, Key: "alice", Policy: login.Name, Cost: 1, ID: "7c9e…",
		Rules: []limiter.RuleState{{Limit: 5, WindowMs: 60_000, Count: 1, Remaining: 4}}}
	for pub.Stats().Published == 0 { // until the Publisher has heard of the viewer
		rdb.Publish(ctx, "ratescope:events:db0", `{"o":"page-1","k":"presence","t":"login|alice","n":1}`)
		pub.Decision(d)
		time.Sleep(10 * time.Millisecond)
	}
	type envelope struct {
		Kind string          `json:"k"`
		Msg  json.RawMessage `json:"m"`
	}
	for {
		m, _ := page.ReceiveMessage(ctx)
		var envs []envelope // a payload is one envelope or an array of them
		if json.Unmarshal([]byte(m.Payload), &envs) != nil {
			envs = make([]envelope, 1)
			_ = json.Unmarshal([]byte(m.Payload), &envs[0])
		}
		if envs[0].Kind != "decision" {
			continue // the page's own presence
		}
		env := envs[0]
		var msg struct {
			Type, Key, Policy, Instance string
			Allowed                     bool
			Count, Limit, Remaining     int
		}
		_ = json.Unmarshal(env.Msg, &msg)
		fmt.Printf("%s from %s: %s/%s allowed=%v %d/%d, %d left\n",
			msg.Type, msg.Instance, msg.Policy, msg.Key, msg.Allowed, msg.Count, msg.Limit, msg.Remaining)
		break
	}
	// Output:
	// decision from checkout-1: login/alice allowed=true 1/5, 4 left
}
