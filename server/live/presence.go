package live

import (
	"context"
	"sync"
	"time"

	"github.com/ratescope/ratescope/internal/bus"
)

// Viewer counts across instances (SPEC §4): every instance announces each
// watched window's count in an envelope of its own (bus.Presence), when it
// changes and again every presenceEvery, spread over the second by the
// window's phase; counts not renewed within bus.PresenceTTL are forgotten,
// so the total stays right when an instance dies. No message lists every
// window: a round sends at most presenceRound envelopes, several to a PUBLISH.
const (
	presenceEvery = bus.PresenceEvery
	presenceRound = 512
)

type presence struct {
	remote *bus.Presence // other instances' counts

	mu   sync.Mutex
	last map[Window]int      // the total last announced to local viewers
	due  map[Window]struct{} // windows whose total may have changed
	own  map[Window]struct{} // windows whose local count changed: for other instances
}

func newPresence() presence {
	return presence{
		remote: bus.NewPresence(),
		last:   map[Window]int{},
		due:    map[Window]struct{}{},
		own:    map[Window]struct{}{},
	}
}

// localViewersChanged runs on every subscribe and unsubscribe. Counts are announced
// from presenceLoop, at most one message per window per snapshotCoalesce: a crowd
// of N viewers arriving must not cost N² messages.
func (v *View) localViewersChanged(w Window, _ int) {
	v.d.Metrics.Viewers.Set(float64(v.hub.Total()))
	p := &v.presence
	p.mu.Lock()
	p.due[w] = struct{}{}
	p.own[w] = struct{}{}
	p.mu.Unlock()
}

// remotePresence records other instances' counts from a payload's envelopes.
func (v *View) remotePresence(envs []bus.Envelope) {
	changed := v.presence.remote.Record(envs, v.d.Instance)
	if len(changed) == 0 {
		return
	}
	p := &v.presence
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range changed {
		p.due[w] = struct{}{}
	}
}

// announceViewers sends w's total viewer count to local viewers, always or only
// when it changed.
func (v *View) announceViewers(w Window, always bool) {
	local := v.hub.Count(w)
	total := local + v.presence.remote.Total(w)
	p := &v.presence
	p.mu.Lock()
	changed := p.last[w] != total
	if total == 0 {
		delete(p.last, w)
	} else {
		p.last[w] = total
	}
	p.mu.Unlock()
	if (changed || always) && local > 0 {
		v.hub.PublishLatest(w, kindViewers, viewersMessage(total))
	}
}

// presenceLoop announces counts to local viewers and to other instances.
func (v *View) presenceLoop(ctx context.Context) {
	t := time.NewTicker(snapshotCoalesce)
	defer t.Stop()
	p := &v.presence
	lastSweep := time.Now()
	announced := map[Window]time.Time{} // when each window's count last went to its viewers
	renewed := map[Window]time.Time{}   // when each window's count last went to other instances
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		p.mu.Lock()
		announce, own := p.due, p.own
		p.due, p.own = map[Window]struct{}{}, map[Window]struct{}{}
		p.mu.Unlock()
		var sweep []Window
		if now.Sub(lastSweep) >= presenceEvery {
			lastSweep = now
			sweep = p.remote.Windows()
		}
		for w := range announce {
			if n := v.hub.Count(w); n == 0 {
				delete(announced, w) // announceViewers keeps the bookkeeping, sends nothing
			} else if prev, ok := announced[w]; ok && !due(now, prev, min(spacing(n), presenceEvery)) {
				p.mu.Lock()
				p.due[w] = struct{}{} // a large audience: count it again later
				p.mu.Unlock()
				continue
			} else {
				announced[w] = now
			}
			v.announceViewers(w, true) // new viewers need the count too
		}
		for _, w := range sweep { // let expired instances fall out
			v.announceViewers(w, false)
		}
		v.announcePresence(now, own, renewed)
	}
}

// announcePresence tells other instances this one's count of each window in own
// (changed) and renews those due, one envelope per window, at most
// presenceRound a round; the rest wait for the next round.
func (v *View) announcePresence(now time.Time, own map[Window]struct{}, renewed map[Window]time.Time) {
	sent := 0
	tell := func(w Window) bool {
		if sent == presenceRound {
			return false
		}
		sent++
		n := v.hub.Count(w)
		if n > 0 {
			if _, ok := renewed[w]; !ok {
				renewed[w] = now.Add(-phase(w)) // renewals spread over the second
			} else {
				renewed[w] = now
			}
		} else {
			delete(renewed, w)
		}
		v.sendPresence(bus.Envelope{Origin: v.d.Instance, Kind: bus.KindPresence, Topic: w.Topic(), Viewers: n}.Encode())
		return true
	}
	for w := range own {
		if !tell(w) {
			v.presence.mu.Lock()
			v.presence.own[w] = struct{}{} // next round
			v.presence.mu.Unlock()
		}
	}
	for w, at := range renewed {
		if _, told := own[w]; !told && due(now, at, presenceEvery) && !tell(w) {
			return
		}
	}
}
