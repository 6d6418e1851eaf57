// Package overview is ratescope's traffic overview: every policy's decisions
// per second, and each policy's heaviest clients — by checks and by denials
// (a shadow policy's would-denials) — over the last minute, across every
// instance.
//
// Each instance counts its own checks in a Collector, an observer of the
// Checker: per policy, counts per second and, per 10-second bucket, two
// Space-Saving summaries (summary.go) of Counters keys each, so memory stays
// bounded whatever the number of clients and a check never waits on Redis.
// Instances merge those counts over Redis Pub/Sub (wire.go) only while
// someone watches an overview. The package knows nothing of HTTP: the
// server answers the API with State and streams Message to viewers through
// Deps.Publish.
package overview

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
)

// Timing of the overview.
const (
	// Every is how often the overview is sent to its viewers, and how often
	// instances exchange counts while someone watches.
	Every = time.Second
	// wantTTL is how long a want holds: an instance that stops wanting is
	// no longer sent summaries after it.
	wantTTL = 3 * Every
	// demandTTL is how long an API call keeps this instance wanting a
	// policy's top lists, so an operator polling the API gets answers at
	// once after the first.
	demandTTL = 30 * time.Second
	// summaryTTL is how long another instance's summary counts: an instance
	// that died falls out of the overview after it.
	summaryTTL = 3 * Every
	// gatherWait bounds how long an API call that starts wanting a policy
	// waits for the other instances' summaries; peersTTL is how long the
	// instances that answered are remembered, so that the next such call
	// waits only for them.
	gatherWait = 500 * time.Millisecond
	peersTTL   = time.Minute
)

// Deps is everything the overview uses.
type Deps struct {
	Redis    bus.Client
	Instance string
	// NowMs is the limiter's clock (Redis time) in epoch milliseconds.
	NowMs func() int64
	// Policies lists the policies in force, in order.
	Policies func() []limiter.Policy
	// Watched lists the policies whose overview this instance's viewers
	// watch; Publish sends one of them its overview message.
	Watched func() []string
	Publish func(policy string, msg []byte)
	// Override names the per-client override in force for key under
	// policy ("key" or "prefix:<prefix>"), "" when none: the top lists
	// mark such clients. Nil: none is marked.
	Override func(policy, key string) string
	// Timeout bounds each PUBLISH.
	Timeout time.Duration
	Log     *slog.Logger
	// Every replaces the package's Every (tests).
	Every time.Duration
}

// Overview collects this instance's counts and merges them with the other
// instances' while someone watches.
type Overview struct {
	d         Deps
	collector *Collector
	kick      chan struct{} // the loop should send a want now
	answer    chan struct{} // the loop should send a summary now

	mu          sync.Mutex
	demand      map[string]time.Time // policies this instance shows top lists of, until
	wantedUntil time.Time            // another instance wants summaries until
	remoteTop   map[string]time.Time // policies another instance shows, until
	remote      map[string]heard     // other instances' latest summaries
	peersAsOf   time.Time            // when remote last held every instance (a full gatherWait)
}

type heard struct {
	at      time.Time
	summary wireSummary
}

// New returns an Overview whose Collector counts the policies in force;
// Run merges and publishes.
func New(d Deps) *Overview {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Every <= 0 {
		d.Every = Every
	}
	o := &Overview{
		d: d, collector: NewCollector(),
		kick: make(chan struct{}, 1), answer: make(chan struct{}, 1),
		demand: map[string]time.Time{}, remoteTop: map[string]time.Time{}, remote: map[string]heard{},
	}
	o.track()
	return o
}

// Collector is the observer to add to the Checker.
func (o *Overview) Collector() *Collector { return o.collector }

// Run sends viewers their overview every Every and exchanges counts with the
// other instances while someone watches, until ctx ends.
func (o *Overview) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		bus.ListenOn(ctx, o.d.Redis, channel(o.d.Redis), o.receive, bus.ListenHooks{
			Interrupted: func(err error) { o.d.Log.Debug("overview pub/sub interrupted; resubscribing", "err", err) },
		})
	})
	t := time.NewTicker(o.d.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-o.kick:
			o.sendWant(ctx)
		case <-o.answer:
			o.sendSummary(ctx)
		case <-t.C:
			o.track()
			watched := o.d.Watched()
			now := time.Now()
			o.mu.Lock()
			for _, p := range watched {
				o.demand[p] = now.Add(wantTTL)
			}
			o.mu.Unlock()
			o.sendWant(ctx)
			o.sendSummary(ctx)
			for _, p := range watched {
				o.d.Publish(p, o.Message(p))
			}
		}
	}
}

// track has the collector count the policies in force.
func (o *Overview) track() {
	ps := o.d.Policies()
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	o.collector.Track(names)
}

// State is the overview of policy now: the API's answer. When this instance
// was not showing that policy's top lists a moment ago, it first asks the
// other instances for theirs and waits for them (at most gatherWait).
func (o *Overview) State(ctx context.Context, policy string) State {
	if o.want(policy, demandTTL) {
		o.gather(ctx)
	}
	return o.state(policy)
}

// Message is the overview message of policy: State with a type.
func (o *Overview) Message(policy string) []byte {
	b, err := json.Marshal(struct {
		Type string `json:"type"`
		State
	}{bus.TypeOverview, o.state(policy)})
	if err != nil {
		panic("overview: failed to encode: " + err.Error()) // plain types: cannot happen
	}
	return b
}

// Watch starts wanting policy's top lists without waiting for them: a new
// viewer's first message is this instance's own, the others' follow.
func (o *Overview) Watch(policy string) { o.want(policy, wantTTL) }

// want records demand for policy's top lists for ttl, asking the loop to
// send a want at once when there was none; it reports that there was none.
func (o *Overview) want(policy string, ttl time.Duration) bool {
	now := time.Now()
	o.mu.Lock()
	cold := !o.demand[policy].After(now)
	if until := now.Add(ttl); until.After(o.demand[policy]) {
		o.demand[policy] = until
	}
	o.mu.Unlock()
	if cold {
		select {
		case o.kick <- struct{}{}:
		default:
		}
	}
	return cold
}

// gather waits until every instance heard from within peersTTL has sent a
// summary since now — or, when this instance knows of none for sure, for
// the whole of gatherWait.
func (o *Overview) gather(ctx context.Context) {
	start := time.Now()
	deadline := start.Add(gatherWait)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		known := start.Sub(o.peersAsOf) < peersTTL
		done := known
		for _, h := range o.remote {
			if start.Sub(h.at) < peersTTL && !h.at.After(start) {
				done = false
			}
		}
		o.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	o.mu.Lock()
	o.peersAsOf = time.Now()
	o.mu.Unlock()
}

// state merges this instance's counts with the fresh summaries of others.
func (o *Overview) state(policy string) State {
	nowMs := o.d.NowMs()
	last := nowMs/1000 - 1 // the last whole second
	now := time.Now()
	o.mu.Lock()
	var others []wireSummary
	for inst, h := range o.remote {
		if now.Sub(h.at) > summaryTTL {
			if now.Sub(h.at) > peersTTL {
				delete(o.remote, inst)
			}
			continue
		}
		others = append(others, h.summary)
	}
	o.mu.Unlock()

	st := State{Policy: policy, NowMs: nowMs, Instances: 1 + len(others), Policies: []PolicyRates{}}
	for _, p := range o.d.Policies() {
		r := PolicyRates{Name: p.Name, Shadow: p.Shadow, Series: newSeries(Seconds)}
		if pc := o.collector.policy(p.Name); pc != nil {
			pc.series(last, Seconds).addTo(&r.Series, last, last)
		}
		for _, s := range others {
			if wr, ok := s.Rates[p.Name]; ok {
				wr.addTo(&r.Series, s.End, last)
			}
		}
		r.rates()
		st.Policies = append(st.Policies, r)
	}
	m := newMinute()
	if pc := o.collector.policy(policy); pc != nil {
		m = pc.minute(nowMs)
	}
	for _, s := range others {
		if t, ok := s.Top[policy]; ok {
			m.merge(t)
		}
	}
	st.Top = m.top()
	o.markOverrides(policy, st.Top.Checks)
	o.markOverrides(policy, st.Top.Denied)
	return st
}

// markOverrides names, in each row, the override in force for its key:
// what this instance holds now, as every instance holds the same within a
// second.
func (o *Overview) markOverrides(policy string, rows []Row) {
	if o.d.Override == nil {
		return
	}
	for i := range rows {
		rows[i].Override = o.d.Override(policy, rows[i].Key)
	}
}

// sendWant tells the other instances which policies' top lists this one
// shows, when it shows any.
func (o *Overview) sendWant(ctx context.Context) {
	now := time.Now()
	o.mu.Lock()
	var wanted []string
	for p, until := range o.demand {
		if until.After(now) {
			wanted = append(wanted, p)
		} else {
			delete(o.demand, p)
		}
	}
	o.mu.Unlock()
	if len(wanted) == 0 {
		return
	}
	slices.Sort(wanted)
	o.publish(ctx, envelope{Origin: o.d.Instance, Kind: kindWant, Want: wanted})
}

// sendSummary publishes this instance's counts while another instance wants
// them: every policy's rates, and the top lists it asked for.
func (o *Overview) sendSummary(ctx context.Context) {
	now := time.Now()
	o.mu.Lock()
	wanted := o.wantedUntil.After(now)
	var tops []string
	for p, until := range o.remoteTop {
		if until.After(now) {
			tops = append(tops, p)
		} else {
			delete(o.remoteTop, p)
		}
	}
	o.mu.Unlock()
	if !wanted {
		return
	}
	nowMs := o.d.NowMs()
	s := wireSummary{End: nowMs / 1000, Rates: map[string]wireRates{}, Top: map[string]wireTop{}}
	policies := *o.collector.policies.Load()
	for _, name := range slices.Sorted(maps.Keys(policies)) {
		if r := policies[name].series(s.End, Seconds+1); r.busy() {
			s.Rates[name] = r
		}
	}
	for _, p := range tops {
		if pc := policies[p]; pc != nil {
			s.Top[p] = pc.minute(nowMs).wire()
		}
	}
	o.publish(ctx, envelope{Origin: o.d.Instance, Kind: kindSummary, Summary: &s})
}

func (o *Overview) publish(ctx context.Context, e envelope) {
	pctx, cancel := context.WithTimeout(ctx, o.d.Timeout)
	defer cancel()
	if err := o.d.Redis.Publish(pctx, channel(o.d.Redis), e.encode()).Err(); err != nil && ctx.Err() == nil {
		o.d.Log.Debug("failed to publish the overview", "kind", e.Kind, "err", err)
	}
}

// receive takes another instance's want or summary.
func (o *Overview) receive(payload []byte) {
	var e envelope
	if err := json.Unmarshal(payload, &e); err != nil || e.Origin == o.d.Instance {
		return
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case e.Kind == kindWant:
		fresh := !o.wantedUntil.After(now)
		o.wantedUntil = now.Add(wantTTL)
		for _, p := range e.Want {
			if !o.remoteTop[p].After(now) {
				fresh = true
			}
			o.remoteTop[p] = now.Add(wantTTL)
		}
		if fresh { // someone starts watching: answer now, not at the next round
			select {
			case o.answer <- struct{}{}:
			default:
			}
		}
	case e.Kind == kindSummary && e.Summary != nil:
		o.remote[e.Origin] = heard{at: now, summary: *e.Summary}
	}
}
