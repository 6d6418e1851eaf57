package server

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratescope/ratescope/internal/naive"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/live"
)

// Race demo bounds (SPEC §6).
const (
	raceMaxRequests     = 500
	raceDefaultRequests = 200
	raceMaxThinkMs      = 1000
	// raceDefaultThinkMs is the think time: each naive request waits this
	// long between its read and its write, each request of the outcome
	// modes this long in its "handler". 200 reads (or peeks) on this
	// machine take a few milliseconds, so 100 ms makes every read precede
	// every write: the overshoot is certain.
	raceDefaultThinkMs = 100
	// raceSlack is how much longer than its think time a race may take to
	// answer: past it, 503 — also when Redis stopped answering. The race's
	// Redis calls stop raceAnswerMargin earlier, so their requests can
	// return and the answer be written in time.
	raceSlack        = 2 * time.Second
	raceAnswerMargin = 500 * time.Millisecond
	// maxConcurrentRaces bounds the races one instance runs at once, each up
	// to raceMaxRequests concurrent checks; a client runs one at a time.
	maxConcurrentRaces = 8
)

// races tracks running races: one per window, one per client address, a
// few at once.
type races struct {
	mu      sync.Mutex
	windows map[string]bool
	clients map[string]bool
}

// start claims key's window for client, or returns the problem that refuses
// the race: 409 when a race runs on that window, 429 when the client runs
// another, 503 when the instance runs as many as it may.
func (r *races) start(key, client string) *problem {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.windows == nil {
		r.windows, r.clients = map[string]bool{}, map[string]bool{}
	}
	switch {
	case r.windows[key]:
		return newProblem(http.StatusConflict, "a race is already running on this window")
	case r.clients[client]:
		return newProblem(http.StatusTooManyRequests, "this client address is running another race; one at a time").
			withHeader("Retry-After", "1")
	case len(r.windows) >= maxConcurrentRaces:
		return unavailable("too many races are running; try again in a moment")
	}
	r.windows[key], r.clients[client] = true, true
	return nil
}

func (r *races) done(key, client string) {
	r.mu.Lock()
	delete(r.windows, key)
	delete(r.clients, client)
	r.mu.Unlock()
}

// raceAPI is what the race demo uses: the sandbox policy and the trusted
// proxies in force, the limiter (atomic) and the naive checks on the same
// Redis, the races running, the live view, Redis's error counter and the log.
type raceAPI struct {
	store  *configStore
	lim    *limiter.Limiter
	naive  *naive.Limiter
	races  *races
	live   *live.View
	errors *prometheus.CounterVec // ratescope_redis_errors_total{op}
	log    *slog.Logger
}

// handleRace runs the race demo on the sandbox policy: POST /api/v1/race.
func handleRace(r raceAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		p, err := readParams(c, fieldKey, fieldPolicy, fieldMode, fieldRequests, fieldThinkMs)
		if err != nil {
			return err
		}
		key := p.key()
		if name, ok := p.values["policy"]; ok && name != sandboxPolicy && !p.failed("policy") {
			p.fail("policy", "races run on the sandbox policy %q only", sandboxPolicy)
		}
		mode := p.values["mode"]
		if !p.failed("mode") && !slices.Contains(raceModes, mode) {
			p.fail("mode", "must be naive, atomic, peekrecord or reserverefund")
		}
		requests := p.integer("requests", raceDefaultRequests, 1, raceMaxRequests)
		thinkMs := p.integer("thinkMs", raceDefaultThinkMs, 0, raceMaxThinkMs)
		if err := p.problem(); err != nil {
			return err
		}
		pol, _ := r.store.lookup(sandboxPolicy)

		client := viewerClient(c.Request(), r.store.load().trusted)
		if p := r.races.start(key, client); p != nil {
			return p
		}
		defer r.races.done(key, client)

		think := time.Duration(thinkMs) * time.Millisecond
		ctx, cancel := context.WithTimeout(c.Request().Context(), think+raceSlack-raceAnswerMargin)
		defer cancel()
		if err := r.lim.Reset(ctx, key, pol); err != nil {
			r.errors.WithLabelValues("reset").Inc()
			return unavailable("failed to reset the window in Redis; try again shortly")
		}
		r.live.Reset(key, pol.Name)

		allowed, denied, failed, took := race(requests, r.contender(ctx, mode, key, pol, think))
		if failed > 0 {
			r.errors.WithLabelValues("race").Add(float64(failed))
			return unavailable("Redis failed or was too slow during the race; try again shortly")
		}
		out := live.RaceOutcome{
			Mode: mode, Requests: requests, Allowed: allowed, Denied: denied,
			Limit: pol.SmallestLimit(), Overshoot: max(0, allowed-pol.SmallestLimit()),
			DurationMs: took.Milliseconds(), Key: key, Policy: pol.Name,
		}
		r.log.Info("race", "mode", mode, "requests", requests, "allowed", allowed, "limit", out.Limit, "duration_ms", out.DurationMs)
		r.live.Race(out)
		return c.JSON(http.StatusOK, out)
	}
}

// raceModes are the race's modes: check-then-act against the one script,
// and for outcomes (a failed login counted), peek-then-record against
// reserve-then-keep.
var raceModes = []string{"naive", "atomic", "peekrecord", "reserverefund"}

// contender is one request of a race in mode: it reports whether the
// request passed — for the outcome modes, whether it reached the handler,
// which then fails after think (a failed login) and so is counted.
func (r raceAPI) contender(ctx context.Context, mode, key string, pol limiter.Policy, think time.Duration) func() (bool, error) {
	switch mode {
	case "atomic":
		return func() (bool, error) {
			d, err := r.lim.Allow(ctx, key, pol, 1)
			return d.Allowed, err
		}
	case "peekrecord":
		// Peek ("any failures left?"), run the handler, record the failure
		// with a real check: every peek precedes every record, so each
		// sees room and fails through.
		return func() (bool, error) {
			d, err := r.lim.Peek(ctx, key, pol, 1)
			if err != nil || !d.Allowed {
				return false, err
			}
			if err := sleepCtx(ctx, think); err != nil {
				return true, err
			}
			_, err = r.lim.Allow(ctx, key, pol, 1)
			return true, err
		}
	case "reserverefund":
		// Check first — the entry holds the room — run the handler, and as
		// it failed keep the entry (a success would refund it): no more
		// than the limit can ever reach the handler.
		return func() (bool, error) {
			d, err := r.lim.Allow(ctx, key, pol, 1)
			if err != nil || !d.Allowed {
				return false, err
			}
			return true, sleepCtx(ctx, think)
		}
	}
	after := thinkAfterRead(ctx, think)
	return func() (bool, error) {
		return r.naive.Allow(ctx, key, pol, naive.Options{AfterRead: after})
	}
}

// sleepCtx waits d, or fails when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// race releases n concurrent checks at once (a start barrier) and counts
// their outcomes.
func race(n int, check func() (bool, error)) (allowed, denied, failed int, took time.Duration) {
	var ok, no, bad atomic.Int64
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	for range n {
		wg.Go(func() {
			ready.Done()
			<-start
			switch yes, err := check(); {
			case err != nil:
				bad.Add(1)
			case yes:
				ok.Add(1)
			default:
				no.Add(1)
			}
		})
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	wg.Wait()
	return int(ok.Load()), int(no.Load()), int(bad.Load()), time.Since(t0)
}

// thinkAfterRead is the application's latency between check and act (SPEC
// §6: ZREMRANGEBYSCORE, ZCARD, then — after thinkMs — ZADD): each naive
// request waits think after its own read, or until the race's context ends.
func thinkAfterRead(ctx context.Context, think time.Duration) func() {
	return func() {
		if think <= 0 {
			return
		}
		t := time.NewTimer(think)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}
