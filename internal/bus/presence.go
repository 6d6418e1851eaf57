package bus

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Viewer counts across instances (SPEC §4): an instance announces each watched
// window's count in a presence envelope of its own — when the count changes
// (0 when its viewers leave) and again every PresenceEvery; a count not renewed
// within PresenceTTL is forgotten, so nobody keeps publishing for, or counting,
// the viewers of an instance that died. Announcing window by window keeps every
// message small however many windows are watched.
const (
	PresenceEvery = time.Second
	PresenceTTL   = 3 * PresenceEvery
)

// Presence remembers the viewer counts other instances announce. Watched is
// what every event asks, so it reads, with no lock, a map that changes only
// when a window starts or stops being watched; a renewal only moves the
// window's expiry, an atomic in that map.
type Presence struct {
	mu      sync.Mutex
	remote  map[Window]map[string]remoteCount // window → instance → its viewers
	watched atomic.Pointer[map[Window]*atomic.Int64]
	now     func() time.Time // time.Now; tests move it
}

type remoteCount struct {
	count   int
	expires time.Time
}

// NewPresence returns an empty Presence.
func NewPresence() *Presence {
	p := &Presence{remote: map[Window]map[string]remoteCount{}, now: time.Now}
	p.watched.Store(&map[Window]*atomic.Int64{})
	return p
}

// Record takes the presence envelopes among envs, except self's own: each
// sets its sender's count of its window (0: its viewers left) for
// PresenceTTL. It returns the windows whose count from some instance changed.
func (p *Presence) Record(envs []Envelope, self string) []Window {
	now := p.now()
	expires := now.Add(PresenceTTL)
	var changed []Window
	p.mu.Lock()
	defer p.mu.Unlock()
	watched := *p.watched.Load()
	var next map[Window]*atomic.Int64 // a copy, once the set of watched windows changes
	for _, e := range envs {
		if e.Kind != KindPresence || e.Origin == self {
			continue
		}
		w := ParseTopic(e.Topic)
		byInstance := p.remote[w]
		if byInstance[e.Origin].count != e.Viewers {
			changed = append(changed, w)
		}
		if e.Viewers > 0 {
			if byInstance == nil {
				byInstance = map[string]remoteCount{}
				p.remote[w] = byInstance
			}
			byInstance[e.Origin] = remoteCount{count: e.Viewers, expires: expires}
		} else if byInstance != nil {
			delete(byInstance, e.Origin)
			if len(byInstance) == 0 {
				delete(p.remote, w)
			}
		}
		until := p.until(w, now)
		u, ok := watched[w]
		if ok && !until.IsZero() {
			u.Store(until.UnixNano()) // a renewal: the set is the same
			continue
		}
		if ok || !until.IsZero() {
			if next == nil {
				next = maps.Clone(watched)
			}
			if until.IsZero() {
				delete(next, w)
			} else {
				u := new(atomic.Int64)
				u.Store(until.UnixNano())
				next[w] = u
			}
			watched = next
		}
	}
	if next != nil {
		p.watched.Store(&next)
	}
	return changed
}

// until is when w's latest unexpired count from some instance expires; zero
// when none is left. p.mu must be held.
func (p *Presence) until(w Window, now time.Time) time.Time {
	var until time.Time
	for _, c := range p.remote[w] {
		if c.count > 0 && c.expires.After(now) && c.expires.After(until) {
			until = c.expires
		}
	}
	return until
}

// Watched reports whether some instance announced viewers of w that have not
// expired. A window nobody watches costs a map lookup.
func (p *Presence) Watched(w Window) bool {
	m := *p.watched.Load()
	if len(m) == 0 {
		return false
	}
	until, ok := m[w]
	return ok && p.now().UnixNano() < until.Load()
}

// Total is w's viewer count across the instances recorded, forgetting counts
// that expired.
func (p *Presence) Total(w Window) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.totalLocked([]Window{w})[0]
}

// Sweep forgets the counts that expired (an instance that stopped announcing,
// e.g. one that died) and the windows left without any.
func (p *Presence) Sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.totalLocked(slices.Collect(maps.Keys(p.remote)))
}

// totalLocked is Total of each of ws, forgetting what expired in one change
// of the watched map. p.mu must be held.
func (p *Presence) totalLocked(ws []Window) []int {
	now := p.now()
	totals := make([]int, len(ws))
	var gone []Window
	for i, w := range ws {
		for inst, c := range p.remote[w] {
			if now.After(c.expires) {
				delete(p.remote[w], inst)
				continue
			}
			totals[i] += c.count
		}
		if len(p.remote[w]) == 0 {
			delete(p.remote, w)
			gone = append(gone, w)
		}
	}
	watched := *p.watched.Load()
	var next map[Window]*atomic.Int64
	for _, w := range gone {
		if _, ok := watched[w]; ok {
			if next == nil {
				next = maps.Clone(watched)
			}
			delete(next, w)
		}
	}
	if next != nil {
		p.watched.Store(&next)
	}
	return totals
}

// Windows lists the windows some instance has announced counts for, expired
// or not: Total on each lets the expired ones fall out.
func (p *Presence) Windows() []Window {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.remote))
}
