package live

import (
	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
)

// The kinds of a lease message (bus.TypeLease): what happened to one lease
// of an inflight policy.
const (
	LeaseAcquired = "acquired"
	LeaseRefused  = "refused" // every lease was held: no lease id
	LeaseRenewed  = "renewed"
	LeaseReleased = "released"
	LeaseExpired  = "expired" // its holder let its lease time run out
)

// leaseMsg is one lease's event: its id, when it started (acquired or
// last renewed) and when it ends — 0 for a release or a refusal — and the
// key's leases after it.
type leaseMsg struct {
	Type      string `json:"type"`
	Kind      string `json:"kind"`
	Key       string `json:"key"`
	Policy    string `json:"policy"`
	LeaseID   string `json:"leaseId"`
	StartMs   int64  `json:"startMs"`
	ExpiresMs int64  `json:"expiresMs"`
	InFlight  int    `json:"inFlight"`
	Limit     int    `json:"limit"`
	NowMs     int64  `json:"nowMs"`
	Instance  string `json:"instance"`
}

// Lease reports what one lease call did (kind LeaseAcquired, LeaseRefused,
// LeaseRenewed or LeaseReleased; a release that found nothing is no
// event), then each lease the call found expired, as a decision is
// reported: to the window's viewers here and on the other instances.
// leaseMs is the policy's lease time, so an expired lease says when it
// started.
func (v *View) Lease(kind string, l limiter.Lease, leaseMs int64) {
	w := Window{Key: l.Key, Policy: l.Policy}
	if kind != "" {
		v.event(bus.TypeLease, w, func() []byte {
			m := leaseMsg{
				Type: bus.TypeLease, Kind: kind, Key: l.Key, Policy: l.Policy, LeaseID: l.ID,
				InFlight: l.InFlight, Limit: l.Limit, NowMs: l.NowMs, Instance: v.d.Instance,
			}
			if kind == LeaseAcquired || kind == LeaseRenewed {
				m.StartMs, m.ExpiresMs = l.NowMs, l.ExpiresMs
			}
			return encode(m)
		})
	}
	for _, e := range l.Expired {
		v.event(bus.TypeLease, w, func() []byte {
			return encode(leaseMsg{
				Type: bus.TypeLease, Kind: LeaseExpired, Key: l.Key, Policy: l.Policy, LeaseID: e.ID,
				StartMs: e.ExpiresMs - leaseMs, ExpiresMs: e.ExpiresMs,
				InFlight: l.InFlight, Limit: l.Limit, NowMs: l.NowMs, Instance: v.d.Instance,
			})
		})
	}
}

// LeaseState is one live lease in a window's state (WindowState.Leases):
// the page draws it as a bar from StartMs to ExpiresMs.
type LeaseState struct {
	ID        string `json:"id"`
	StartMs   int64  `json:"startMs"`
	ExpiresMs int64  `json:"expiresMs"`
}

func leaseStates(ls []limiter.LiveLease) []LeaseState {
	if ls == nil {
		return nil
	}
	out := make([]LeaseState, len(ls))
	for i, l := range ls {
		out[i] = LeaseState{ID: l.ID, StartMs: l.StartMs, ExpiresMs: l.ExpiresMs}
	}
	return out
}
