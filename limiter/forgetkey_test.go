package limiter_test

import (
	"testing"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestForgetKey: ForgetKey drops one key's cached denial under one policy,
// whatever rules it was made under, and no other entry.
func TestForgetKey(t *testing.T) {
	lim := cachedLimiter(t, newClient(t, redistest.URL(t)))
	p := mustPolicy(t, "fk=1/1m")
	key, other := uniqueKey(t), uniqueKey(t)
	fillUntilDenied(t, lim, key, p)
	fillUntilDenied(t, lim, other, p)
	if d := allow(t, lim, key, p, 1); !d.Cached {
		t.Fatalf("want a cached denial, got %+v", d)
	}
	lim.ForgetKey(key, "fk")
	if st := lim.DenyCacheStats(); st.Entries != 1 {
		t.Fatalf("after ForgetKey: %+v, want only the other key's entry", st)
	}
	if d := allow(t, lim, key, p, 1); d.Cached || d.Allowed {
		t.Errorf("want Redis's denial after ForgetKey, got %+v", d)
	}
	if d := allow(t, lim, other, p, 1); !d.Cached {
		t.Errorf("the other key's entry went too: %+v", d)
	}
}
