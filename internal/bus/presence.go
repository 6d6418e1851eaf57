package bus

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Viewer counts across instances (SPEC §4): every instance with viewers
// announces its counts on change and every PresenceEvery; counts not renewed
// within PresenceTTL are forgotten, so nobody keeps publishing for, or
// counting, the viewers of an instance that died.
const (
	PresenceEvery = time.Second
	PresenceTTL   = 3 * PresenceEvery
)

// Presence remembers the viewer counts other instances announce. Watched is
// what every event asks, so it reads an immutable map with no lock; the
// announcements, about one a second per instance, rebuild that map.
type Presence struct {
	mu      sync.Mutex
	remote  map[Window]map[string]remoteCount // window → instance → its viewers
	watched atomic.Pointer[map[Window]time.Time]
	now     func() time.Time // time.Now; tests move it
}

type remoteCount struct {
	count   int
	expires time.Time
}

// NewPresence returns an empty Presence.
func NewPresence() *Presence {
	p := &Presence{remote: map[Window]map[string]remoteCount{}, now: time.Now}
	p.watched.Store(&map[Window]time.Time{})
	return p
}

// Record takes instance's presence envelope (counts keyed by topic): its
// counts replace what it announced before. It returns the windows whose count
// from instance changed.
func (p *Presence) Record(instance string, counts map[string]int) []Window {
	expires := p.now().Add(PresenceTTL)
	byWindow := make(map[Window]int, len(counts))
	for topic, n := range counts {
		byWindow[ParseTopic(topic)] = n
	}
	var changed []Window
	p.mu.Lock()
	defer p.mu.Unlock()
	for w, byInstance := range p.remote {
		if _, ok := byWindow[w]; !ok {
			if _, had := byInstance[instance]; had {
				delete(byInstance, instance)
				changed = append(changed, w)
			}
			if len(byInstance) == 0 {
				delete(p.remote, w) // nobody announces it: forget the window
			}
		}
	}
	for w, n := range byWindow {
		if p.remote[w] == nil {
			p.remote[w] = map[string]remoteCount{}
		}
		if p.remote[w][instance].count != n {
			changed = append(changed, w)
		}
		p.remote[w][instance] = remoteCount{count: n, expires: expires}
	}
	p.rebuild()
	return changed
}

// rebuild publishes, for Watched, until when each window has viewers.
func (p *Presence) rebuild() {
	watched := make(map[Window]time.Time, len(p.remote))
	for w, byInstance := range p.remote {
		for _, c := range byInstance {
			if c.count > 0 && c.expires.After(watched[w]) {
				watched[w] = c.expires
			}
		}
	}
	p.watched.Store(&watched)
}

// Watched reports whether some instance announced viewers of w that have not
// expired. A window nobody watches costs a map lookup.
func (p *Presence) Watched(w Window) bool {
	m := *p.watched.Load()
	if len(m) == 0 {
		return false
	}
	until, ok := m[w]
	return ok && p.now().Before(until)
}

// Total is w's viewer count across the instances recorded, forgetting counts
// that expired.
func (p *Presence) Total(w Window) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	total := 0
	now := p.now()
	expired := false
	for inst, c := range p.remote[w] {
		if now.After(c.expires) {
			delete(p.remote[w], inst)
			expired = true
			continue
		}
		total += c.count
	}
	if len(p.remote[w]) == 0 {
		delete(p.remote, w)
	}
	if expired {
		p.rebuild()
	}
	return total
}

// Sweep forgets the counts that expired (an instance that stopped announcing,
// e.g. one that died) and the windows left without any.
func (p *Presence) Sweep() {
	for _, w := range p.Windows() {
		p.Total(w)
	}
}

// Windows lists the windows some instance has announced counts for, expired
// or not: Total on each lets the expired ones fall out.
func (p *Presence) Windows() []Window {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Keys(p.remote))
}
