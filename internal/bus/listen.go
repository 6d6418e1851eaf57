package bus

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// A failed subscription is tried again after resubscribeFirst, each
	// further failure in a row waiting twice as long up to resubscribeMax: an
	// outage costs a few attempts, not two a second per instance.
	resubscribeFirst = 500 * time.Millisecond
	resubscribeMax   = 10 * time.Second
	subscribeTimeout = 2 * time.Second
	pubsubIdle       = 2 * time.Second // ping the subscription after this long without messages
)

// ListenHooks observe a subscription's failures; either may be nil.
type ListenHooks struct {
	// Interrupted is called with why the subscription failed: once per
	// outage, not again for each attempt that fails while it lasts.
	Interrupted func(err error)
	// Resubscribed is called when a subscription is confirmed again after an
	// interruption, with the attempts it took.
	Resubscribed func(attempts int)
	// Reconnect is called each time the subscription starts over.
	Reconnect func()
}

// Listen hands every payload published on Channel(rdb) to handle (Decode reads
// it) until ctx ends. It watches the subscription itself (a ping when nothing
// arrives for a while) and starts over with a fresh connection whenever it
// fails, so it survives Redis restarts and pauses.
func Listen(ctx context.Context, rdb Client, handle func(payload []byte), h ListenHooks) {
	var wait time.Duration // zero: the first attempt
	attempts := 0          // since the last confirmed subscription
	confirmed := func() {
		if attempts > 0 && h.Resubscribed != nil {
			h.Resubscribed(attempts)
		}
		attempts = 0
	}
	for ctx.Err() == nil {
		if wait > 0 {
			if h.Reconnect != nil {
				h.Reconnect()
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		subscribed, err := receiveUntilError(ctx, rdb, handle, confirmed)
		if ctx.Err() != nil {
			return
		}
		if attempts == 0 && h.Interrupted != nil {
			h.Interrupted(err)
		}
		attempts++
		wait = nextWait(wait, subscribed)
	}
}

// nextWait is the pause before the next attempt: the first after a
// subscription that was confirmed, doubled (up to the cap) after one that
// never was.
func nextWait(last time.Duration, subscribed bool) time.Duration {
	if subscribed || last == 0 {
		return resubscribeFirst
	}
	return min(2*last, resubscribeMax)
}

// receiveUntilError reports whether Redis confirmed the subscription (and
// calls confirmed when it does), and the error that ended it.
func receiveUntilError(ctx context.Context, rdb Client, handle func([]byte), confirmed func()) (subscribed bool, err error) {
	ps := rdb.Subscribe(ctx, Channel(rdb))
	defer ps.Close()
	// A blocked receive does not watch ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	_, err = ps.Receive(sctx) // the subscription's confirmation
	cancel()
	if err != nil {
		return false, err
	}
	confirmed()
	for {
		msg, err := ps.ReceiveTimeout(ctx, pubsubIdle)
		if ctx.Err() != nil {
			return true, nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			pctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
			err = ps.Ping(pctx)
			cancel()
			if err != nil {
				return true, err
			}
			continue
		}
		if err != nil {
			return true, err
		}
		if m, ok := msg.(*redis.Message); ok {
			handle([]byte(m.Payload))
		}
	}
}
