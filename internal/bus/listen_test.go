package bus

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestResubscribeBacksOff: while Redis refuses every connection, attempts
// to subscribe again are spaced 0.5 s, 1 s, 2 s, … apart (up to 10 s), not
// made twice a second for as long as the outage lasts.
func TestResubscribeBacksOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused at once
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()

	ctx, cancel := context.WithCancel(context.Background())
	var reconnects, interrupted atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Listen(ctx, rdb, func([]byte) {}, ListenHooks{
			Reconnect:   func() { reconnects.Add(1) },
			Interrupted: func(error) { interrupted.Add(1) },
		})
	}()
	// 0.5 + 1 + 2 = 3.5 s: by 4.5 s the backoff has made 3 or 4 attempts
	// after the first; a fixed 0.5 s would have made 9.
	time.Sleep(4500 * time.Millisecond)
	cancel()
	<-done
	if n := reconnects.Load(); n < 2 || n > 4 {
		t.Fatalf("%d attempts to subscribe again in 4.5 s of refused connections, want 3 (0.5 s, 1 s, 2 s apart)", n)
	}
	if n := interrupted.Load(); n != 1 {
		t.Fatalf("one outage reported %d times, want once", n)
	}
}

func TestNextWait(t *testing.T) {
	var got []string
	w := time.Duration(0)
	for range 8 {
		w = nextWait(w, false)
		got = append(got, w.String())
	}
	if fmt.Sprint(got) != "[500ms 1s 2s 4s 8s 10s 10s 10s]" {
		t.Fatalf("waits after failures in a row: %v", got)
	}
	if w = nextWait(10*time.Second, true); w != resubscribeFirst {
		t.Fatalf("after a confirmed subscription the wait is %v, want %v", w, resubscribeFirst)
	}
}
