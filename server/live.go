package server

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/hub"
)

// Timings of the live view (SPEC §4).
const (
	eventsChannel      = "ratescope:events" // classic Pub/Sub: works standalone, on a cluster and embedded
	snapshotCoalesce   = 50 * time.Millisecond
	snapshotEvery      = time.Second
	presenceEvery      = time.Second
	presenceTTL        = 3 * presenceEvery // an instance that stops announcing is forgotten
	publishQueue       = 4096
	resubscribeBackoff = 500 * time.Millisecond
	subscribeTimeout   = 2 * time.Second
	pubsubIdle         = 2 * time.Second // ping the subscription after this long without messages

	// fanoutBudget is how many frames a second one instance spends on one
	// window's change-driven snapshots, and as many on its viewer counts,
	// before it spaces them further than snapshotCoalesce. A frame costs
	// about 10 µs of CPU on a 2-core VM (BENCHMARKS.md), so this is a fifth
	// of a core; windows with up to 1,000 viewers here are not affected.
	// Ticks (SPEC: every --tick-interval), decisions, resets and races are
	// never spaced.
	fanoutBudget = 20_000
)

// spacing is how far apart messages to n viewers of one window must be for the
// instance to spend at most fanoutBudget frames a second on them:
// snapshotCoalesce up to 1,000 viewers, 500 ms for 10,000.
func spacing(n int) time.Duration {
	return max(snapshotCoalesce, time.Duration(n)*time.Second/fanoutBudget)
}

// due reports whether something last sent at last may go again at now, gap
// apart; half a loop period of slack absorbs the ticker's jitter.
func due(now, last time.Time, gap time.Duration) bool {
	return now.Sub(last) >= gap-snapshotCoalesce/2
}

// Messages a newer one supersedes: a viewer that has not yet been sent the last
// tick or viewer count gets only the newest (hub.PublishLatest), so a busy
// instance sends fewer of them instead of queueing decisions behind stale ones.
const (
	kindTick hub.Kind = iota
	kindViewers
)

// live feeds the viewers of this instance: the clock, snapshots, and the
// events of every instance, which travel through Redis Pub/Sub. It knows
// nothing of WebSockets: it publishes encoded messages into the hub.
type live struct {
	a   *app
	hub *hub.Hub

	ctx   context.Context // ends at shutdown: viewers get 1001
	stop  context.CancelFunc
	conns sync.WaitGroup // open viewer connections

	redisUp atomic.Bool
	status  atomic.Pointer[[]byte] // the current status message
	lastNow atomic.Pointer[clockReading]

	mu          sync.Mutex
	remote      map[string]map[string]presence // topic -> instance -> count
	lastViewers map[string]int                 // topic -> total last announced
	dirty       map[string]struct{}            // topics whose snapshot is stale
	viewersDue  map[string]struct{}            // topics whose viewer count may have changed
	presenceDue bool

	outbox chan []byte // envelopes for Redis, published in order by one goroutine
}

type presence struct {
	count   int
	expires time.Time
}

type clockReading struct {
	redisMs int64
	at      time.Time
}

func newLive(a *app) *live {
	l := &live{
		a:           a,
		remote:      map[string]map[string]presence{},
		lastViewers: map[string]int{},
		dirty:       map[string]struct{}{},
		viewersDue:  map[string]struct{}{},
		outbox:      make(chan []byte, publishQueue),
	}
	l.hub = hub.New(hub.WithOnChange(l.localViewersChanged))
	l.ctx, l.stop = context.WithCancel(context.Background())
	l.redisUp.Store(true) // until a tick says otherwise
	l.status.Store(new(encode(statusMsg{Type: "status", Redis: "up"})))
	return l
}

// shutdown closes every viewer with 1001 and waits for them, up to ctx.
func (l *live) shutdown(ctx context.Context) {
	l.stop()
	done := make(chan struct{})
	go func() { l.conns.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func topicOf(key, policy string) string { return policy + "|" + key }

func splitTopic(topic string) (key, policy string) {
	policy, key, _ = strings.Cut(topic, "|")
	return key, policy
}

// run drives the clock, snapshots, presence and the Pub/Sub bridge until
// shutdown, then drops every viewer.
func (l *live) run() {
	ctx := l.ctx
	var wg sync.WaitGroup
	wg.Go(func() { l.tickLoop(ctx) })
	wg.Go(func() { l.snapshotLoop(ctx) })
	wg.Go(func() { l.presenceLoop(ctx) })
	wg.Go(func() { l.publishLoop(ctx) })
	wg.Go(func() { l.subscribeLoop(ctx) })
	wg.Wait()
	l.hub.Close()
}

// nowMs estimates Redis's clock from the last tick: for events such as resets
// that carry a time but need no Redis round trip of their own.
func (l *live) nowMs() int64 {
	r := l.lastNow.Load()
	if r == nil {
		return time.Now().UnixMilli()
	}
	return r.redisMs + time.Since(r.at).Milliseconds()
}

// setStatus records Redis's state and tells every viewer when it changed;
// it reports whether it did.
func (l *live) setStatus(up bool) bool {
	state := "down"
	if up {
		state = "up"
	}
	msg := encode(statusMsg{Type: "status", Redis: state})
	l.status.Store(&msg)
	if l.redisUp.Swap(up) == up {
		return false
	}
	l.a.log.Warn("redis status changed", "redis", state)
	l.hub.Broadcast(msg)
	return true
}

// tickLoop reads Redis's clock once per tick for all viewers of this instance;
// a failed read is what marks Redis down for them.
func (l *live) tickLoop(ctx context.Context) {
	t := time.NewTicker(l.a.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tctx, cancel := context.WithTimeout(ctx, l.a.cfg.CheckTimeout)
		now, err := l.a.rdb.Time(tctx).Result()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Repeat "down" while it lasts: viewers hear no ticks, and the
			// page takes a silent socket for a dead one.
			if !l.setStatus(false) && l.hub.Total() > 0 {
				l.hub.Broadcast(*l.status.Load())
			}
			continue
		}
		l.setStatus(true)
		ms := now.UnixMilli()
		l.lastNow.Store(&clockReading{redisMs: ms, at: time.Now()})
		if l.hub.Total() > 0 {
			l.hub.BroadcastLatest(kindTick, encode(tickMsg{Type: "tick", NowMs: ms}))
		}
	}
}

// snapshotLoop sends each watched window's snapshot after changes (at most one
// per snapshotCoalesce, spaced further for large audiences) and every
// snapshotEvery.
func (l *live) snapshotLoop(ctx context.Context) {
	t := time.NewTicker(snapshotCoalesce)
	defer t.Stop()
	sent := map[string]time.Time{} // topic → when its last snapshot went out
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		l.mu.Lock()
		dirty := l.dirty
		l.dirty = map[string]struct{}{}
		l.mu.Unlock()
		watched := l.hub.Topics()
		for _, topic := range watched {
			last, seen := sent[topic]
			if !seen {
				last, sent[topic] = now, now // its viewers got one on connect
			}
			_, changed := dirty[topic]
			gap := min(spacing(l.hub.Count(topic)), snapshotEvery)
			if !due(now, last, snapshotEvery) && !(changed && due(now, last, gap)) {
				if changed {
					l.markDirty(topic) // not yet: keep it for a later round
				}
				continue
			}
			sent[topic] = now
			if msg, ok := l.snapshot(ctx, topic); ok {
				l.hub.Publish(topic, msg)
			}
		}
		if len(sent) > len(watched) { // forget windows nobody watches any more
			keep := make(map[string]time.Time, len(watched))
			for _, topic := range watched {
				keep[topic] = sent[topic]
			}
			sent = keep
		}
	}
}

// snapshot reads one window as a snapshot message.
func (l *live) snapshot(ctx context.Context, topic string) ([]byte, bool) {
	key, name := splitTopic(topic)
	p, ok := l.a.store.lookup(name)
	if !ok {
		return nil, false
	}
	sctx, cancel := context.WithTimeout(ctx, l.a.cfg.CheckTimeout)
	defer cancel()
	w, err := l.a.lim.Window(sctx, key, p)
	if err != nil {
		return nil, false
	}
	s := toSnapshotJSON(w)
	s.Type = "snapshot"
	return encode(s), true
}

func (l *live) markDirty(topic string) {
	l.mu.Lock()
	l.dirty[topic] = struct{}{}
	l.mu.Unlock()
}

// watchedElsewhere reports whether another instance has viewers of topic.
func (l *live) watchedElsewhere(topic string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for _, p := range l.remote[topic] {
		if p.count > 0 && now.Before(p.expires) {
			return true
		}
	}
	return false
}

// event delivers one of this instance's events (a decision, reset or race) to
// its own viewers and, when others watch the window, to other instances. A
// window nobody watches — the common case for checks — costs two map lookups;
// msg builds the message only when someone does.
func (l *live) event(kind, key, policy string, msg func() any) {
	topic := topicOf(key, policy)
	local := l.hub.Count(topic) > 0
	elsewhere := l.watchedElsewhere(topic)
	if !local && !elsewhere {
		return
	}
	b := encode(msg())
	if local {
		l.hub.Publish(topic, b)
		l.markDirty(topic)
	}
	if elsewhere {
		l.send(envelope{Origin: l.a.instance, Kind: kind, Topic: topic, Msg: b})
	}
}

func (l *live) decision(d limiter.Decision) {
	l.event("decision", d.Key, d.Policy, func() any { return newDecisionMsg(d, l.a.instance) })
}

func (l *live) reset(key, policy string) {
	l.event("reset", key, policy, func() any {
		return resetMsg{Type: "reset", Key: key, Policy: policy, NowMs: l.nowMs()}
	})
}

// race tells viewers of a window the outcome of a race (SPEC §6); the
// snapshot that follows shows its entries.
func (l *live) race(key, policy string, msg any) {
	l.event("race", key, policy, func() any { return msg })
}

// send queues an envelope for Redis; when the queue is full the event is
// dropped (viewers still converge through snapshots) rather than slowing checks.
func (l *live) send(e envelope) {
	select {
	case l.outbox <- encode(e):
	default:
		l.a.metrics.pubsubDropped.Inc()
	}
}

func (l *live) publishLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-l.outbox:
			pctx, cancel := context.WithTimeout(ctx, l.a.cfg.CheckTimeout)
			if err := l.a.rdb.Publish(pctx, eventsChannel, b).Err(); err != nil && ctx.Err() == nil {
				l.a.metrics.redisErrors.WithLabelValues("publish").Inc()
			}
			cancel()
		}
	}
}

// subscribeLoop receives other instances' events. It watches the
// subscription itself (a ping when nothing arrives for a while) and starts
// over with a fresh connection whenever it fails, so it survives Redis
// restarts and pauses; each new start after a failure counts as a reconnect.
func (l *live) subscribeLoop(ctx context.Context) {
	failed := false
	for ctx.Err() == nil {
		if failed {
			l.a.metrics.pubsubReconnects.Inc()
			select {
			case <-ctx.Done():
				return
			case <-time.After(resubscribeBackoff):
			}
		}
		failed = true
		if err := l.receiveUntilError(ctx); err != nil && ctx.Err() == nil {
			l.a.log.Warn("redis pub/sub interrupted; resubscribing", "err", err)
		}
	}
}

func (l *live) receiveUntilError(ctx context.Context) error {
	ps := l.a.rdb.Subscribe(ctx, eventsChannel)
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
			l.receive([]byte(m.Payload))
		}
	}
}

func (l *live) receive(payload []byte) {
	var e envelope
	if err := json.Unmarshal(payload, &e); err != nil || e.Origin == l.a.instance {
		return
	}
	switch e.Kind {
	case "presence":
		l.remotePresence(e.Origin, e.Viewers)
	case "decision", "reset", "race":
		if l.hub.Count(e.Topic) > 0 {
			l.hub.Publish(e.Topic, e.Msg)
			l.markDirty(e.Topic)
		}
	}
}

// Viewer counts across instances: every instance announces its own counts on
// change and every presenceEvery; counts not renewed within presenceTTL are
// forgotten, so the total stays right when an instance dies.

// localViewersChanged runs on every subscribe and unsubscribe. Counts are
// announced from presenceLoop, at most one message per window per
// snapshotCoalesce: a crowd of N viewers arriving must not cost N² messages.
func (l *live) localViewersChanged(topic string, _ int) {
	l.a.metrics.viewers.Set(float64(l.hub.Total()))
	l.mu.Lock()
	l.presenceDue = true
	l.viewersDue[topic] = struct{}{}
	l.mu.Unlock()
}

func (l *live) remotePresence(instance string, counts map[string]int) {
	expires := time.Now().Add(presenceTTL)
	l.mu.Lock()
	defer l.mu.Unlock()
	for topic, byInstance := range l.remote {
		if _, ok := counts[topic]; !ok {
			if _, had := byInstance[instance]; had {
				delete(byInstance, instance)
				l.viewersDue[topic] = struct{}{}
			}
		}
	}
	for topic, n := range counts {
		if l.remote[topic] == nil {
			l.remote[topic] = map[string]presence{}
		}
		if l.remote[topic][instance].count != n {
			l.viewersDue[topic] = struct{}{}
		}
		l.remote[topic][instance] = presence{count: n, expires: expires}
	}
}

// announceViewers sends topic's total viewer count to local viewers, always
// or only when it changed.
func (l *live) announceViewers(topic string, always bool) {
	local := l.hub.Count(topic)
	l.mu.Lock()
	total := local
	now := time.Now()
	for inst, p := range l.remote[topic] {
		if now.After(p.expires) {
			delete(l.remote[topic], inst)
			continue
		}
		total += p.count
	}
	if len(l.remote[topic]) == 0 {
		delete(l.remote, topic)
	}
	changed := l.lastViewers[topic] != total
	if total == 0 {
		delete(l.lastViewers, topic)
	} else {
		l.lastViewers[topic] = total
	}
	l.mu.Unlock()
	if (changed || always) && local > 0 {
		l.hub.PublishLatest(topic, kindViewers, encode(viewersMsg{Type: "viewers", Count: total}))
	}
}

func (l *live) presenceLoop(ctx context.Context) {
	t := time.NewTicker(snapshotCoalesce)
	defer t.Stop()
	last := time.Now()
	quiet := true
	announced := map[string]time.Time{} // topic → when its count last went out
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		presenceDue := l.presenceDue || time.Since(last) >= presenceEvery
		l.presenceDue = false
		announce := l.viewersDue
		l.viewersDue = map[string]struct{}{}
		var sweep []string
		if time.Since(last) >= presenceEvery {
			for topic := range l.remote {
				sweep = append(sweep, topic)
			}
		}
		l.mu.Unlock()
		for topic := range announce {
			if n := l.hub.Count(topic); n == 0 {
				delete(announced, topic) // announceViewers keeps the bookkeeping, sends nothing
			} else if prev, ok := announced[topic]; ok && !due(time.Now(), prev, min(spacing(n), presenceEvery)) {
				l.mu.Lock()
				l.viewersDue[topic] = struct{}{} // a large audience: count it again later
				l.mu.Unlock()
				continue
			} else {
				announced[topic] = time.Now()
			}
			l.announceViewers(topic, true) // new viewers need the count too
		}
		for _, topic := range sweep { // let expired instances fall out
			l.announceViewers(topic, false)
		}
		if !presenceDue {
			continue
		}
		last = time.Now()
		counts := map[string]int{}
		for _, topic := range l.hub.Topics() {
			counts[topic] = l.hub.Count(topic)
		}
		// An instance without viewers stays silent after saying so once.
		if len(counts) > 0 || !quiet {
			l.send(envelope{Origin: l.a.instance, Kind: "presence", Viewers: counts})
		}
		quiet = len(counts) == 0
	}
}
