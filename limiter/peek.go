package limiter

import "context"

// Peek decides a request of the given cost for key under p as Allow would,
// and records nothing: would it pass now? Cost 0 asks whether the window is
// within its limits at all, which only a CountDenied window can be past.
// The local deny cache neither answers nor keeps peeks, so a peek always
// asks Redis. The Decision has Peek set, no ID, and counts without the
// request's cost.
func (l *Limiter) Peek(ctx context.Context, key string, p Policy, cost int) (Decision, error) {
	return l.PeekWithin(ctx, Within{}, key, p, cost)
}

// PeekWithin is Peek bounded by w, as AllowWithin is.
func (l *Limiter) PeekWithin(ctx context.Context, w Within, key string, p Policy, cost int) (Decision, error) {
	if err := ValidateKey(key); err != nil {
		return Decision{}, err
	}
	if p.InFlight() {
		return Decision{}, ErrInFlight
	}
	if cost != 0 && !p.CostFits(cost) {
		return Decision{}, ErrInvalidCost
	}
	if w.Total > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.Total)
		defer cancel()
	}
	d, _, err := algorithmOf(p).allow(ctx, l, w.RoundTrip, key, p, cost, true)
	if err != nil {
		return Decision{}, err
	}
	d.Shadow = p.Shadow
	return d, nil
}
