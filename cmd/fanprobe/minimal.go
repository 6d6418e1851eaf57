package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// minimal is the bar ratescope's fan-out is held to: viewers in a map under a
// mutex, a buffered channel and a writer goroutine each, and per check one
// frame, encoded once, to every viewer.
type minimal struct {
	mu      sync.Mutex
	viewers map[chan []byte]struct{}
	seq     atomic.Int64
}

func minimalMain(args []string) int {
	fs := flag.NewFlagSet("fanprobe minimal", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	raiseFileLimit()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanprobe minimal:", err)
		return 1
	}
	fmt.Println("http://" + ln.Addr().String())
	srv := &http.Server{Handler: newMinimal(), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "fanprobe minimal:", err)
		return 1
	}
	return 0
}

func newMinimal() http.Handler {
	m := &minimal{viewers: map[chan []byte]struct{}{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", m.watch)
	mux.HandleFunc("POST /api/v1/check", m.check)
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	return mux
}

// check makes one decision frame, encoded once, and queues it for every viewer.
func (m *minimal) check(w http.ResponseWriter, r *http.Request) {
	id := fmt.Sprintf("%016x-%d", time.Now().UnixNano(), m.seq.Add(1))
	now := time.Now().UnixMilli()
	frame := fmt.Appendf(nil, `{"type":"decision","key":%q,"policy":%q,"allowed":true,"count":1,"limit":100000,"nowMs":%d,"oldestMs":%d,"retryAfterMs":0,"id":%q,"instance":"minimal"}`,
		r.URL.Query().Get("key"), r.URL.Query().Get("policy"), now, now, id)
	m.mu.Lock()
	for ch := range m.viewers {
		select {
		case ch <- frame:
		default: // a viewer 64 frames behind misses this one
		}
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"allowed":true,"id":%q}`, id)
}

// watch writes every frame queued for this viewer until it leaves.
func (m *minimal) watch(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := c.CloseRead(context.Background())
	ch := make(chan []byte, 64)
	m.mu.Lock()
	m.viewers[ch] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.viewers, ch)
		m.mu.Unlock()
	}()
	for {
		select {
		case frame := <-ch:
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := c.Write(wctx, websocket.MessageText, frame)
			cancel()
			if err != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
