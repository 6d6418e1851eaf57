package live

import (
	"context"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
)

// The lab (SPEC §8) streams through the same hub and bus as windows do. A lab's
// topic is a Window whose Policy is labTopic: no policy can be named so (policy
// names are a-z 0-9 _ -), so a lab never meets a window's viewers.
const labTopic = "@lab"

func labWindow(lab string) Window { return Window{Key: lab, Policy: labTopic} }

// isLab reports whether w is a lab's topic rather than a window.
func isLab(w Window) bool { return w.Policy == labTopic }

// LabAlgorithm is one algorithm's decision of a lab request.
type LabAlgorithm struct {
	Algorithm    limiter.Algorithm `json:"algorithm"`
	Allowed      bool              `json:"allowed"`
	Remaining    int               `json:"remaining"`
	RetryAfterMs int64             `json:"retryAfterMs"`
}

// LabResult is one lab request decided under every algorithm: the answer to
// POST /api/v1/lab/check and, with a type, the lab message.
type LabResult struct {
	Lab      string `json:"lab"`
	ID       string `json:"id"` // names the request, so every tab draws one mark per request
	Limit    int    `json:"limit"`
	WindowMs int64  `json:"windowMs"`
	Cost     int    `json:"cost"`
	// Results holds one decision per algorithm, in SPEC §8's order.
	Results []LabAlgorithm `json:"results"`
	// NowMs is the log's clock reading; the others ran within the same
	// MULTI/EXEC, right after it.
	NowMs int64 `json:"nowMs"`
}

// NewLabResult turns AllowEach's decisions into a LabResult.
func NewLabResult(lab string, limit int, windowMs int64, cost int, ds []limiter.Decision) LabResult {
	r := LabResult{Lab: lab, ID: uuid.NewString(), Limit: limit, WindowMs: windowMs, Cost: cost, Results: make([]LabAlgorithm, len(ds))}
	for i, d := range ds {
		r.Results[i] = LabAlgorithm{Algorithm: d.Algorithm, Allowed: d.Allowed, Remaining: d.Bound().Remaining, RetryAfterMs: d.RetryAfterMs}
		if i == 0 {
			r.NowMs = d.NowMs
		}
	}
	return r
}

type labMsg struct {
	Type string `json:"type"`
	LabResult
}

func labMessage(r LabResult) []byte { return encode(labMsg{Type: bus.TypeLab, LabResult: r}) }

type labResetMsg struct {
	Type  string `json:"type"`
	Lab   string `json:"lab"`
	NowMs int64  `json:"nowMs"`
}

func labResetMessage(lab string, nowMs int64) []byte {
	return encode(labResetMsg{Type: bus.TypeLabReset, Lab: lab, NowMs: nowMs})
}

// labSnapshotMsg gives a viewer that joins the lab's recent requests, so a
// reloaded or late tab draws what the others drew.
type labSnapshotMsg struct {
	Type     string      `json:"type"`
	Lab      string      `json:"lab"`
	Requests []LabResult `json:"requests"`
	NowMs    int64       `json:"nowMs"`
}

type labHelloMsg struct {
	Type     string `json:"type"`
	Instance string `json:"instance"`
	Lab      string `json:"lab"`
	TickMs   int64  `json:"tickMs"`
}

// Lab reports one lab request to every viewer of the lab, on every instance.
func (v *View) Lab(r LabResult) {
	v.event(bus.TypeLab, labWindow(r.Lab), func() []byte { return labMessage(r) })
}

// LabReset reports that a lab's windows were emptied.
func (v *View) LabReset(lab string) {
	v.event(bus.TypeLabReset, labWindow(lab), func() []byte { return labResetMessage(lab, v.nowMs()) })
}

// ServeLab streams a lab to conn, as Serve does a window: hello, the Redis
// status, then every lab request and reset, the clock and the viewer count.
func (v *View) ServeLab(conn *websocket.Conn, lab string) {
	w := labWindow(lab)
	v.serve(conn, w, func(since time.Time) [][]byte {
		first := [][]byte{
			encode(labHelloMsg{Type: bus.TypeHello, Instance: v.d.Instance, Lab: lab, TickMs: v.d.TickInterval.Milliseconds()}),
			*v.clock.status.Load(),
		}
		if v.d.LabRequests == nil {
			return first
		}
		// Read like a window's snapshot: shared by a crowd that joins at
		// once, within the budget. None: the stream brings what follows, and
		// Redis's state is in the status.
		snap, ok := v.firstRead(w, since, func(ctx context.Context) ([]byte, int, error) {
			rs, err := v.d.LabRequests(ctx, lab)
			if err != nil {
				return nil, 0, err
			}
			return encode(labSnapshotMsg{Type: bus.TypeLabSnapshot, Lab: lab, Requests: rs, NowMs: v.nowMs()}), len(rs), nil
		})
		if !ok {
			return first
		}
		return append(first, snap)
	})
}
