package bus

import (
	"slices"
	"testing"
	"time"
)

func TestPresenceHonoursExpiry(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := NewPresence()
	p.now = func() time.Time { return now }
	w := Window{Key: "alice", Policy: "demo"}
	other := Window{Key: "bob", Policy: "demo"}
	if p.Watched(w) {
		t.Fatal("watched before any presence")
	}
	if changed := p.Record("a", map[string]int{w.Topic(): 2, other.Topic(): 0}); !slices.Equal(changed, []Window{w}) {
		t.Errorf("first counts changed %v, want %v (a zero count is no change)", changed, []Window{w})
	}
	p.Record("b", map[string]int{w.Topic(): 1})
	if !p.Watched(w) || p.Watched(other) || p.Total(w) != 3 {
		t.Fatalf("Watched(w)=%v Watched(other)=%v Total(w)=%d, want true false 3", p.Watched(w), p.Watched(other), p.Total(w))
	}
	if changed := p.Record("a", map[string]int{w.Topic(): 2, other.Topic(): 0}); len(changed) != 0 {
		t.Errorf("the same counts again changed %v", changed)
	}

	now = now.Add(PresenceTTL - time.Millisecond)
	p.Record("b", map[string]int{w.Topic(): 1}) // b renews, a does not
	now = now.Add(2 * time.Millisecond)
	if !p.Watched(w) || p.Total(w) != 1 {
		t.Fatalf("after a's counts expired: Watched=%v Total=%d, want true 1", p.Watched(w), p.Total(w))
	}
	if changed := p.Record("b", nil); !slices.Equal(changed, []Window{w}) {
		t.Errorf("b's viewers leaving changed %v, want %v", changed, []Window{w})
	}
	if p.Watched(w) {
		t.Error("watched after every instance's viewers left")
	}

	p.Record("c", map[string]int{other.Topic(): 4})
	now = now.Add(PresenceTTL + time.Millisecond) // c dies without a word
	if p.Watched(other) {
		t.Error("a dead instance's viewers still watch")
	}
	for _, w := range p.Windows() {
		p.Total(w)
	}
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
	counts := map[string]int{}
	for i := range 1000 {
		counts[Window{Key: "k" + string(rune('a'+i%26)) + time.Duration(i).String(), Policy: "demo"}.Topic()] = 1
	}
	p.Record("a", counts)
	p.Record("b", map[string]int{Window{Key: "x", Policy: "demo"}.Topic(): 1})
	p.Record("a", nil) // a's viewers all left
	if n := len(p.Windows()); n != 1 {
		t.Fatalf("%d windows kept after their viewers left, want 1", n)
	}
	now = now.Add(PresenceTTL + time.Millisecond) // b dies without a word
	p.Sweep()
	if n := len(p.Windows()); n != 0 {
		t.Fatalf("%d windows kept after their instance died, want 0", n)
	}
}
