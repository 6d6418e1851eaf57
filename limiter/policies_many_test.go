package limiter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratescope/ratescope/limiter"
)

// TestParsePoliciesManyIsLinear: a config file of the largest size allowed
// holds a few hundred thousand policies; looking each name up among those
// before it took minutes (300,000: ~4.5·10^10 comparisons). A name given
// twice is still found, however far apart.
func TestParsePoliciesManyIsLinear(t *testing.T) {
	specs := make([]string, 300_000)
	for i := range specs {
		specs[i] = fmt.Sprintf("p%d=5/1m", i)
	}
	start := time.Now()
	ps, err := limiter.ParsePolicies(specs)
	if err != nil || len(ps) != len(specs) {
		t.Fatalf("%d policies, %v", len(ps), err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("parsed in %v", d)
	}
	if _, err := limiter.ParsePolicies(append(specs, "p7=1/1s")); err == nil || err.Error() != `policy "p7" is defined twice` {
		t.Fatalf("a name given twice: %v", err)
	}
}
