package livebus

import "github.com/ratescope/ratescope/limiter"

// TypeDecision is the "type" of the decision message (SPEC §4).
const TypeDecision = "decision"

// decisionMsg is the decision message: every check on a window, from any
// instance.
type decisionMsg struct {
	Type         string  `json:"type"`
	Key          string  `json:"key"`
	Policy       string  `json:"policy"`
	Allowed      bool    `json:"allowed"`
	Count        int     `json:"count"`
	Limit        int     `json:"limit"`
	NowMs        int64   `json:"nowMs"`
	OldestMs     *int64  `json:"oldestMs"`
	RetryAfterMs int64   `json:"retryAfterMs"`
	ID           *string `json:"id"` // null when nothing was recorded, as in the check's answer
	Instance     string  `json:"instance"`
	Cached       bool    `json:"cached,omitempty"`
	Shadow       bool    `json:"shadow,omitempty"`
	WouldDeny    bool    `json:"wouldDeny,omitempty"`
}

// DecisionMessage is the decision message of d, made by instance. Like the
// check's answer, allowed says whether the request passed: a shadow policy's
// would-deny is allowed, marked wouldDeny, with the would-be retry (SPEC §9).
func DecisionMessage(d limiter.Decision, instance string) []byte {
	b := d.Bound()
	m := decisionMsg{
		Type: TypeDecision, Key: d.Key, Policy: d.Policy, Allowed: !d.Denied(),
		Count: b.Count, Limit: b.Limit, NowMs: d.NowMs, RetryAfterMs: d.RetryAfterMs,
		Instance: instance,
		Cached:   d.Cached, Shadow: d.Shadow, WouldDeny: d.WouldDeny(),
	}
	if b.OldestMs >= 0 { // the limiter's -1 for "empty" is null
		m.OldestMs = &b.OldestMs
	}
	if d.Allowed { // recorded: a denial or a would-deny is not
		m.ID = &d.ID
	}
	return encode(m)
}
