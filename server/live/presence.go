package live

import (
	"context"
	"sync"
	"time"

	"github.com/ratescope/ratescope/internal/bus"
)

// Viewer counts across instances (SPEC §4): every instance announces its own
// counts on change and every presenceEvery; counts not renewed within
// bus.PresenceTTL are forgotten (bus.Presence), so the total stays right
// when an instance dies.
const presenceEvery = bus.PresenceEvery

type presence struct {
	remote *bus.Presence // other instances' counts

	mu     sync.Mutex
	last   map[Window]int      // the total last announced
	due    map[Window]struct{} // windows whose count may have changed
	ownDue bool                // this instance's counts changed
}

func newPresence() presence {
	return presence{
		remote: bus.NewPresence(),
		last:   map[Window]int{},
		due:    map[Window]struct{}{},
	}
}

// localViewersChanged runs on every subscribe and unsubscribe. Counts are announced
// from presenceLoop, at most one message per window per snapshotCoalesce: a crowd
// of N viewers arriving must not cost N² messages.
func (v *View) localViewersChanged(w Window, _ int) {
	v.d.Metrics.Viewers.Set(float64(v.hub.Total()))
	p := &v.presence
	p.mu.Lock()
	p.ownDue = true
	p.due[w] = struct{}{}
	p.mu.Unlock()
}

// remotePresence records another instance's counts (keyed as on the wire).
func (v *View) remotePresence(instance string, counts map[string]int) {
	changed := v.presence.remote.Record(instance, counts)
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
	last := time.Now()
	quiet := true
	announced := map[Window]time.Time{} // when each window's count last went out
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		periodic := time.Since(last) >= presenceEvery
		ownDue := p.ownDue || periodic
		p.ownDue = false
		announce := p.due
		p.due = map[Window]struct{}{}
		p.mu.Unlock()
		var sweep []Window
		if periodic {
			sweep = p.remote.Windows()
		}
		for w := range announce {
			if n := v.hub.Count(w); n == 0 {
				delete(announced, w) // announceViewers keeps the bookkeeping, sends nothing
			} else if prev, ok := announced[w]; ok && !due(time.Now(), prev, min(spacing(n), presenceEvery)) {
				p.mu.Lock()
				p.due[w] = struct{}{} // a large audience: count it again later
				p.mu.Unlock()
				continue
			} else {
				announced[w] = time.Now()
			}
			v.announceViewers(w, true) // new viewers need the count too
		}
		for _, w := range sweep { // let expired instances fall out
			v.announceViewers(w, false)
		}
		if !ownDue {
			continue
		}
		last = time.Now()
		counts := map[string]int{}
		for _, w := range v.hub.Topics() {
			counts[w.Topic()] = v.hub.Count(w)
		}
		// An instance without viewers stays silent after saying so once.
		if len(counts) > 0 || !quiet {
			v.send(bus.Envelope{Origin: v.d.Instance, Kind: bus.KindPresence, Viewers: counts}.Encode())
		}
		quiet = len(counts) == 0
	}
}
