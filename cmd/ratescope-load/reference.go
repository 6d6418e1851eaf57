package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live"
)

// The reference server: the least a coder/websocket server can do to give viewers
// ratescope's stream, measured in the same run so ratescope's fan-out is reported as
// a ratio to it. It follows coder/websocket's chat example — subscribers in a map
// under a mutex, a small buffered channel each, one writer goroutine per viewer
// with a timeout per write, CloseRead for a write-only socket — and sends the same
// tick stream (a tick every --tick-interval to every viewer, encoded once). There is
// no Redis: POST /api/v1/check makes a decision message with a fresh id, sends it
// to every viewer and answers like an allowed check. /metrics has the figures the
// load tool reads from ratescope.
const (
	refBuffer       = 64 // messages queued per viewer before it is dropped
	refWriteTimeout = 5 * time.Second
)

// referenceMain is this binary re-executed as "ratescope-load reference --addr A
// --tick-interval T". It returns the exit code.
func referenceMain(args []string) int {
	fs := flag.NewFlagSet("reference", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	tick := fs.Duration("tick-interval", 100*time.Millisecond, "how often every viewer gets a tick")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if _, err := raiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, "reference:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runReference(ctx, *addr, *tick); err != nil {
		fmt.Fprintln(os.Stderr, "reference:", err)
		return 1
	}
	return 0
}

type refServer struct {
	mu          sync.Mutex
	subscribers map[*refSubscriber]struct{}

	viewers prometheus.Gauge
	dropped prometheus.Counter
}

type refSubscriber struct {
	msgs      chan []byte
	closeSlow func()
}

func runReference(ctx context.Context, addr string, tick time.Duration) error {
	reg := prometheus.NewRegistry()
	s := &refServer{
		subscribers: map[*refSubscriber]struct{}{},
		viewers:     prometheus.NewGauge(prometheus.GaugeOpts{Name: mViewers, Help: "Viewers connected."}),
		dropped:     prometheus.NewCounter(prometheus.CounterOpts{Name: mDropped, Help: "Viewers dropped as slow."}),
	}
	reg.MustRegister(s.viewers, s.dropped, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", s.subscribe)
	mux.HandleFunc("POST /api/v1/check", s.check)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go s.ticks(ctx, tick)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("failed to serve: %w", err)
	}
	return nil
}

// ticks sends every viewer a tick every interval, encoded once.
func (s *refServer) ticks(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.publish(live.TickMessage(now.UnixMilli()))
		}
	}
}

// check stands in for a check: a decision with a fresh id, to every viewer.
func (s *refServer) check(w http.ResponseWriter, _ *http.Request) {
	id := uuid.NewString()
	now := time.Now().UnixMilli()
	s.publish(bus.DecisionMessage(limiter.Decision{
		Allowed: true, Key: "reference", Policy: "fan", Cost: 1, NowMs: now, ID: id,
		Rules: []limiter.RuleState{{Limit: 100000, WindowMs: 60000, Count: 1, Remaining: 99999, OldestMs: now}},
	}, "reference"))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"allowed": true, "id": id})
}

func (s *refServer) publish(msg []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subscribers {
		select {
		case sub.msgs <- msg:
		default:
			go sub.closeSlow()
		}
	}
}

func (s *refServer) subscribe(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := c.CloseRead(context.Background())
	var once sync.Once
	sub := &refSubscriber{msgs: make(chan []byte, refBuffer), closeSlow: func() {
		once.Do(func() {
			s.dropped.Inc()
			_ = c.Close(websocket.StatusTryAgainLater, "fell behind")
		})
	}}
	s.mu.Lock()
	s.subscribers[sub] = struct{}{}
	s.viewers.Set(float64(len(s.subscribers)))
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subscribers, sub)
		s.viewers.Set(float64(len(s.subscribers)))
		s.mu.Unlock()
	}()
	for {
		select {
		case msg := <-sub.msgs:
			wctx, cancel := context.WithTimeout(ctx, refWriteTimeout)
			err := c.Write(wctx, websocket.MessageText, msg)
			cancel()
			if err != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}
