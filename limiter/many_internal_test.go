package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
