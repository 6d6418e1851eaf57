package bus

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	resubscribeBackoff = 500 * time.Millisecond
	subscribeTimeout   = 2 * time.Second
	pubsubIdle         = 2 * time.Second // ping the subscription after this long without messages
)

// ListenHooks observe a subscription's failures; either may be nil.
type ListenHooks struct {
	// Interrupted is called with why the subscription failed.
	Interrupted func(err error)
	// Reconnect is called each time the subscription starts over.
	Reconnect func()
}

// Listen hands every payload published on Channel(rdb) to handle (Decode reads
// it) until ctx ends. It watches the subscription itself (a ping when nothing
// arrives for a while) and starts over with a fresh connection whenever it
// fails, so it survives Redis restarts and pauses.
func Listen(ctx context.Context, rdb Client, handle func(payload []byte), h ListenHooks) {
	failed := false
	for ctx.Err() == nil {
		if failed {
			if h.Reconnect != nil {
				h.Reconnect()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(resubscribeBackoff):
			}
		}
		failed = true
		if err := receiveUntilError(ctx, rdb, handle); err != nil && ctx.Err() == nil && h.Interrupted != nil {
			h.Interrupted(err)
		}
	}
}

func receiveUntilError(ctx context.Context, rdb Client, handle func([]byte)) error {
	ps := rdb.Subscribe(ctx, Channel(rdb))
	defer ps.Close()
	// A blocked receive does not watch ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	_, err := ps.Receive(sctx) // the subscription's confirmation
	cancel()
	if err != nil {
		return err
	}
	for {
		msg, err := ps.ReceiveTimeout(ctx, pubsubIdle)
		if ctx.Err() != nil {
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			pctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
			err = ps.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if m, ok := msg.(*redis.Message); ok {
			handle([]byte(m.Payload))
		}
	}
}
