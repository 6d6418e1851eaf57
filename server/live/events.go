package live

import (
	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
)

// The events the rest of the server reports: a decision per check, a reset, a race,
// a refund or settle of one check's entries.
// Each reaches this instance's viewers of the window and, when others watch it, the
// other instances. A window nobody watches — the common case for checks — costs two
// map lookups: the message is built only when someone does.

// Decision reports one check's decision.
func (v *View) Decision(d limiter.Decision) {
	v.event(bus.TypeDecision, Window{Key: d.Key, Policy: d.Policy}, func() []byte {
		return bus.DecisionMessage(d, v.d.Instance)
	})
}

// Reset reports that a window was emptied.
func (v *View) Reset(key, policy string) {
	w := Window{Key: key, Policy: policy}
	v.event(bus.TypeReset, w, func() []byte { return resetMessage(w, v.nowMs()) })
}

// Race reports a race's outcome (SPEC §6); the snapshot that follows shows its
// entries.
func (v *View) Race(r RaceOutcome) {
	v.event(bus.TypeRace, Window{Key: r.Key, Policy: r.Policy}, func() []byte { return raceMessage(r) })
}

// Adjustment reports a refund or a settle (kind AdjustRefund or AdjustSettle)
// of one check's entries. Like a decision it is never dropped for a viewer
// that stays connected, and the snapshot that follows shows the entries
// that left or joined the window.
func (v *View) Adjustment(kind string, a limiter.Adjustment) {
	v.event(bus.TypeAdjustment, Window{Key: a.Key, Policy: a.Policy}, func() []byte {
		return adjustmentMessage(kind, a, v.d.Instance)
	})
}

func (v *View) event(kind string, w Window, build func() []byte) {
	local := v.hub.Count(w) > 0
	elsewhere := v.presence.remote.Watched(w)
	if !local && !elsewhere {
		return
	}
	msg := build()
	var env []byte
	if elsewhere {
		env = bus.Envelope{Origin: v.d.Instance, Kind: kind, Topic: w.Topic(), Msg: msg}.Encode()
	}
	v.order.Lock()
	if local {
		v.hub.Publish(w, msg)
	}
	if elsewhere {
		v.send(env)
	}
	v.order.Unlock()
	if local && !isLab(w) {
		v.snapshots.markDirty(w)
	}
}
