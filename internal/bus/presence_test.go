package bus

import (
	"slices"
	"testing"
	"time"
)

// presence is a presence envelope: origin's count of w.
func presence(origin string, w Window, n int) Envelope {
	return Envelope{Origin: origin, Kind: KindPresence, Topic: w.Topic(), Viewers: n}
}

func TestPresenceHonoursExpiry(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := NewPresence()
	p.now = func() time.Time { return now }
	w := Window{Key: "alice", Policy: "demo"}
	other := Window{Key: "bob", Policy: "demo"}
	if p.Watched(w) {
		t.Fatal("watched before any presence")
	}
	if changed := p.Record([]Envelope{presence("a", w, 2), presence("a", other, 0), presence("me", other, 5)}, "me"); !slices.Equal(changed, []Window{w}) {
		t.Errorf("first counts changed %v, want %v (a zero count is no change; its own are ignored)", changed, []Window{w})
	}
	p.Record([]Envelope{presence("b", w, 1)}, "me")
	if !p.Watched(w) || p.Watched(other) || p.Total(w) != 3 {
		t.Fatalf("Watched(w)=%v Watched(other)=%v Total(w)=%d, want true false 3", p.Watched(w), p.Watched(other), p.Total(w))
	}
	if changed := p.Record([]Envelope{presence("a", w, 2)}, "me"); len(changed) != 0 {
		t.Errorf("the same count again changed %v", changed)
	}

	now = now.Add(PresenceTTL - time.Millisecond)
	p.Record([]Envelope{presence("b", w, 1)}, "me") // b renews, a does not
	now = now.Add(2 * time.Millisecond)
	if !p.Watched(w) || p.Total(w) != 1 {
		t.Fatalf("after a's count expired: Watched=%v Total=%d, want true 1", p.Watched(w), p.Total(w))
	}
	if changed := p.Record([]Envelope{presence("b", w, 0)}, "me"); !slices.Equal(changed, []Window{w}) {
		t.Errorf("b's viewers leaving changed %v, want %v", changed, []Window{w})
	}
	if p.Watched(w) {
		t.Error("watched after every instance's viewers left")
	}

	p.Record([]Envelope{presence("c", other, 4)}, "me")
	if !p.Watched(other) {
		t.Fatal("a window announced is not watched")
	}
	now = now.Add(PresenceTTL + time.Millisecond) // c dies without a word
	if p.Watched(other) {
		t.Error("a dead instance's viewers still watch")
	}
	p.Sweep()
	if ws := p.Windows(); len(ws) != 0 {
		t.Errorf("expired windows kept: %v", ws)
	}
}

// TestPresenceForgetsWindows: what a Publisher keeps is bounded by what is
// watched now — windows whose viewers left, or whose instance died, go.
func TestPresenceForgetsWindows(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := NewPresence()
	p.now = func() time.Time { return now }
	var arrive, leave []Envelope
	for i := range 1000 {
		w := Window{Key: "k" + time.Duration(i).String(), Policy: "demo"}
		arrive, leave = append(arrive, presence("a", w, 1)), append(leave, presence("a", w, 0))
	}
	p.Record(arrive, "me")
	p.Record([]Envelope{presence("b", Window{Key: "x", Policy: "demo"}, 1)}, "me")
	p.Record(leave, "me") // a's viewers all left
	if n := len(p.Windows()); n != 1 || len(*p.watched.Load()) != 1 {
		t.Fatalf("%d windows kept (%d watched) after their viewers left, want 1", n, len(*p.watched.Load()))
	}
	now = now.Add(PresenceTTL + time.Millisecond) // b dies without a word
	p.Sweep()
	if n := len(p.Windows()); n != 0 || len(*p.watched.Load()) != 0 {
		t.Fatalf("%d windows kept (%d watched) after their instance died, want 0", n, len(*p.watched.Load()))
	}
}

// TestPresenceRenewalKeepsTheWatchedMap: renewing counts of windows already
// watched moves their expiry without building a new map, so thousands of
// windows renewed every second cost no copying.
func TestPresenceRenewalKeepsTheWatchedMap(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := NewPresence()
	p.now = func() time.Time { return now }
	var envs []Envelope
	for i := range 1000 {
		envs = append(envs, presence("a", Window{Key: "k" + time.Duration(i).String(), Policy: "demo"}, 1))
	}
	p.Record(envs, "me")
	before := p.watched.Load()
	for range 3 {
		now = now.Add(PresenceTTL - time.Millisecond)
		p.Record(envs, "me")
	}
	if p.watched.Load() != before {
		t.Error("a renewal built a new watched map")
	}
	if !p.Watched(envs[999].window()) {
		t.Error("a renewed window expired")
	}
}

func (e Envelope) window() Window { return ParseTopic(e.Topic) }
