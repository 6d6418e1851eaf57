package limiter_test

import (
	"fmt"
	"testing"

	"github.com/ratescope/ratescope/limiter"
)

// TestDescriptorsBoundPolicies: the limiter's own checks read each
// algorithm's bounds from its Descriptor, the one place they are written —
// a spec's largest limit (MaxLimit: ExactLimit within the limiter's
// MaxLimit) and a request's largest cost (MaxCost besides the smallest
// limit) — as server/envoyconf reads them for envoyproxy/ratelimit's files.
func TestDescriptorsBoundPolicies(t *testing.T) {
	for _, d := range limiter.Algorithms() {
		if d.ExactLimit < 1 || d.ExactWindow < 0 || d.MaxCost < 0 || d.MaxLimit != min(d.ExactLimit, limiter.MaxLimit) {
			t.Errorf("%s: ExactLimit %d, ExactWindow %v, MaxCost %d, MaxLimit %d", d.Name, d.ExactLimit, d.ExactWindow, d.MaxCost, d.MaxLimit)
		}
		top := fmt.Sprintf("p=%d/1m@%s", d.MaxLimit, d.Name)
		p, err := limiter.ParsePolicy(top)
		if err != nil {
			t.Errorf("%s: %v", top, err)
			continue
		}
		if _, err := limiter.ParsePolicy(fmt.Sprintf("p=%d/1m@%s", d.MaxLimit+1, d.Name)); err == nil {
			t.Errorf("%s: a limit of MaxLimit+1 taken", d.Name)
		}
		want := d.MaxLimit
		if d.MaxCost > 0 {
			want = min(want, d.MaxCost)
		}
		if p.MaxCost() != want || !p.CostFits(want) || p.CostFits(want+1) {
			t.Errorf("%s: MaxCost %d, want %d", top, p.MaxCost(), want)
		}
	}
}
