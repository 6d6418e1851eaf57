package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/internal/redisdata"
	"github.com/ratescope/ratescope/internal/redistest"
)

// TestManyReplyOfTheWrongShapeFailsEachCall: a many variant's reply that is
// not one reply per call (a script body that returned nothing for one call
// ends Lua's array there) fails every call of the unit with an error — it
// never panics the goroutine that sends the pipeline.
func TestManyReplyOfTheWrongShapeFailsEachCall(t *testing.T) {
	for _, v := range []any{[]any{[]any{int64(1), int64(5)}}, "OK", int64(3), nil} {
		u := unit{
			{ctx: context.Background(), done: make(chan struct{})},
			{ctx: context.Background(), done: make(chan struct{})},
		}
		cmd := redis.NewCmd(context.Background())
		cmd.SetVal(v)
		u.finish(cmd, nil, 0, time.Now())
		for i, c := range u {
			<-c.done
			if c.err == nil || c.res != nil {
				t.Errorf("reply %#v: call %d got %v, %v; want an error", v, i, c.res, c.err)
			}
		}
	}
}

// TestBatchedLeaseCallsReportExpiredLeases: lease calls sent together share
// one call of their script's many variant, and one of them that finds
// expired leases reports each one's id as the script alone does — the
// variant's tonumber keeps its base (lease ids travel as four base-16
// numbers), for ids with letters and ids of digits only.
func TestBatchedLeaseCallsReportExpiredLeases(t *testing.T) {
	opt, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	expired := []string{"3f2a9c1e-0b4d-4e8f-9a6b-1c2d3e4f5a6b", "12345678-1234-4234-9234-123456789012"}
	key := redisdata.LogKey("lease-many-"+uuid.NewString(), "p")
	for i, id := range expired {
		if err := c.ZAdd(ctx, key, redis.Z{Score: float64(1 + i), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var calls []*call
	for _, k := range []string{key, redisdata.LogKey("lease-many-"+uuid.NewString(), "p")} {
		calls = append(calls, &call{ctx: ctx, script: acquireScript, keys: []string{k},
			args: []any{uuid.NewString(), 1000, 5, redisdata.MaxEvict}, done: make(chan struct{})})
	}
	if u := combine(calls, true); len(u) != 1 {
		t.Fatalf("the lease calls make %d script calls, want them in one", len(u))
	}
	(&batcher{rdb: c, maxBatch: 64, maxInFlight: 1}).sendCalls(ctx, calls)
	for _, cl := range calls {
		<-cl.done
		if cl.err != nil {
			t.Fatal(cl.err)
		}
	}
	res := calls[0].res
	if len(res) != 5+5*len(expired) || res[4] != int64(len(expired)) {
		t.Fatalf("reply %v: want %d expired leases reported", res, len(expired))
	}
	for i, id := range expired {
		if got := leaseIDOf(res[5+5*i : 9+5*i]); got != id {
			t.Errorf("expired lease %d reported as %q, want %q", i, got, id)
		}
	}
	if n := c.ZCard(ctx, key).Val(); n != 1 {
		t.Errorf("the log holds %d leases, want the new one alone", n)
	}
}
