// Package readiness tells whether Redis accepts the limiter's writes now —
// what /readyz and gRPC health report — and logs a Redis outage as one line
// when it starts, a summary at most every SummaryInterval while it lasts, and
// one line when it ends.
//
// Two things feed it: a probe that runs a tiny write script (TIME and a SET
// with an expiry) once every ProbeInterval — with RequireReplicas, a write
// that replicas must acknowledge — and the outcome of every check (it is an
// httplimit.Observer of the Checker). Redis is "up" while the probe writes
// and the checks since the previous probe did not all fail; otherwise it is
// named by the error Redis gave, as Word names it: "readonly" for a replica,
// "oom" for a full Redis under noeviction, "noreplicas" when too few replicas
// confirm a write, "down" for a timeout or a lost connection.
// A check is no write probe (a denial writes nothing), so only a probe that
// wrote brings Redis back up.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// Timing of the probe and of the outage summaries. A Redis that stops
// accepting writes is reported within ProbeInterval + ProbeTimeout, and one
// that accepts them again within ProbeInterval.
const (
	ProbeInterval   = time.Second
	ProbeTimeout    = time.Second
	SummaryInterval = 10 * time.Second
)

// Up is the Redis state of a Redis that accepts the limiter's writes.
const Up = "up"

// Down names a Redis that did not answer: a timeout, a refused or lost
// connection.
const Down = "down"

// probeKey is the one key the probe writes; it expires on its own.
const probeKey = "ratescope:ready"

// probeScript reads Redis's clock and writes it: a write the way the
// limiter's scripts write (EVALSHA, EVAL when the script is not cached), so a
// replica answers READONLY and a full Redis under noeviction OOM.
var probeScript = redis.NewScript(`local t = redis.call('TIME')
redis.call('SET', KEYS[1], t[1], 'PX', 10000)
return 1`)

// State is Redis as readiness last found it.
type State struct {
	// Redis is Up, or the error that keeps it from deciding (Word).
	Redis string
	// Since is when Redis entered this state.
	Since time.Time
}

// Ready reports whether Redis accepts the limiter's writes.
func (s State) Ready() bool { return s.Redis == Up }

// Monitor follows Redis's readiness. It observes every check as an
// httplimit.Observer, at the cost of an atomic add. It is safe for
// concurrent use.
type Monitor struct {
	rdb      prober
	log      *slog.Logger
	replicas int // the probe's write must reach this many replicas (WAIT)

	ok, failed atomic.Int64 // checks since the previous probe
	lastErr    atomic.Pointer[error]

	mu       sync.Mutex
	state    State
	known    chan struct{} // closed after the first probe
	onChange []func(State)
	outage   outage
}

// New returns a Monitor of rdb that logs outages to log (nil: discarded).
// Redis counts as up until the first probe has run; Wait waits for it.
func New(rdb prober, log *slog.Logger) *Monitor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Monitor{rdb: rdb, log: log, known: make(chan struct{}), state: State{Redis: Up, Since: time.Now()}}
}

// prober is what the probe needs of a client: scripts, and a pipeline to
// send WAIT on the same connection.
type prober interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
}

// RequireReplicas makes the probe's write count only once n replicas hold it
// (WAIT, within the probe's timeout), as the limiter's allowed decisions do
// with durable replicas: Redis is up only while it can confirm a decision.
// Fewer is named "noreplicas". Call it before Run.
func (m *Monitor) RequireReplicas(n int) { m.replicas = n }

// OnChange calls f with each new state, when readiness turns on or off or
// the error naming Redis changes. Call it before Run.
func (m *Monitor) OnChange(f func(State)) {
	m.mu.Lock()
	m.onChange = append(m.onChange, f)
	m.mu.Unlock()
}

// Started is part of httplimit.Observer; a check's start says nothing.
func (m *Monitor) Started(httplimit.Target) {}

// Finished records a check's outcome: Redis answered (the local deny cache
// answering says nothing of Redis), or failed or did not answer in time. A
// check that ended because its caller went away is not counted.
func (m *Monitor) Finished(_ httplimit.Target, res httplimit.Result, _ time.Duration) {
	switch {
	case res.Err == nil:
		if !res.Decision.Cached {
			m.ok.Add(1)
		}
	case !errors.Is(res.Err, context.Canceled):
		err := res.Err
		m.lastErr.Store(&err)
		m.failed.Add(1)
	}
}

// Decided is part of httplimit.Observer; Finished has seen the decision.
func (m *Monitor) Decided(limiter.Decision) {}

// State is Redis as the last probe found it.
func (m *Monitor) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

// Wait returns the state once the first probe has run, or the state so far
// when ctx ends first.
func (m *Monitor) Wait(ctx context.Context) State {
	select {
	case <-m.known:
	case <-ctx.Done():
	}
	return m.State()
}

// Run probes Redis at once and then every ProbeInterval until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(ProbeInterval)
	defer t.Stop()
	first := true
	for {
		m.round(ctx)
		if first {
			close(m.known)
			first = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round probes once and judges the checks since the previous round with it.
func (m *Monitor) round(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	err := m.probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	ok, failed := m.ok.Swap(0), m.failed.Swap(0)
	if err == nil && failed > 0 && ok == 0 {
		if last := m.lastErr.Load(); last != nil {
			err = *last
		}
	}
	m.set(err, failed, time.Now())
}

// probe writes once, and with RequireReplicas waits for the replicas on the
// same connection (sending the script in full: once a second, it needs no
// cache).
func (m *Monitor) probe(ctx context.Context) error {
	if m.replicas == 0 {
		return probeScript.Run(ctx, m.rdb, []string{probeKey}).Err()
	}
	pipe := m.rdb.Pipeline()
	write := probeScript.Eval(ctx, pipe, []string{probeKey})
	wait := redis.NewIntCmd(ctx, "wait", m.replicas, (ProbeTimeout / 2).Milliseconds())
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	if err := write.Err(); err != nil {
		return err
	}
	if n, err := wait.Result(); err != nil || n < int64(m.replicas) {
		return noReplicas(fmt.Sprintf("NOREPLICAS %d of %d replicas acknowledged the probe's write in time (%v)", n, m.replicas, err))
	}
	return nil
}

// noReplicas is a probe whose write too few replicas acknowledged: a Redis
// error by its form, named as a check that failed for the same reason is.
type noReplicas string

func (e noReplicas) Error() string { return string(e) }

// RedisError marks it as go-redis's redis.Error.
func (noReplicas) RedisError() {}

// set moves to the state err names (nil: up), counting failed checks toward
// the outage, and logs what the outage log says.
func (m *Monitor) set(err error, failed int64, now time.Time) {
	word := Up
	if err != nil {
		word = Word(err)
	}
	m.mu.Lock()
	changed := word != m.state.Redis
	if changed {
		m.state = State{Redis: word, Since: now}
	}
	st := m.state
	subs := m.onChange
	line := m.outage.observe(err, failed, now)
	m.mu.Unlock()
	line.log(m.log)
	if changed {
		for _, f := range subs {
			f(st)
		}
	}
}

// Word names err as readiness reports it: the first word of a Redis error
// reply, lower-cased ("readonly", "oom", "noscript", "misconf", "loading"),
// or Down for anything else — a timeout, a refused or dropped connection.
func Word(err error) string {
	var re redis.Error
	if !errors.As(err, &re) {
		return Down
	}
	first, _, _ := strings.Cut(re.Error(), " ")
	w := strings.Map(func(r rune) rune {
		switch {
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		case r >= 'a' && r <= 'z':
			return r
		}
		return -1
	}, first)
	if w == "" || w == Up {
		return "error"
	}
	return w
}
