package server

import (
	"encoding/json"

	"github.com/ratescope/ratescope/limiter"
)

// The WebSocket messages of SPEC §4. Each is encoded once and the same bytes
// go to every viewer.

type helloMsg struct {
	Type     string           `json:"type"`
	Instance string           `json:"instance"`
	Key      string           `json:"key"`
	Policy   string           `json:"policy"`
	Rules    []policyRuleJSON `json:"rules"`
	TickMs   int64            `json:"tickMs"`
}

type statusMsg struct {
	Type  string `json:"type"`
	Redis string `json:"redis"`
}

type tickMsg struct {
	Type  string `json:"type"`
	NowMs int64  `json:"nowMs"`
}

type decisionMsg struct {
	Type         string `json:"type"`
	Key          string `json:"key"`
	Policy       string `json:"policy"`
	Allowed      bool   `json:"allowed"`
	Count        int    `json:"count"`
	Limit        int    `json:"limit"`
	NowMs        int64  `json:"nowMs"`
	OldestMs     *int64 `json:"oldestMs"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	ID           string `json:"id"`
	Instance     string `json:"instance"`
}

type resetMsg struct {
	Type   string `json:"type"`
	Key    string `json:"key"`
	Policy string `json:"policy"`
	NowMs  int64  `json:"nowMs"`
}

type viewersMsg struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

// encode marshals a message; the types above cannot fail to encode.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("server: failed to encode a message: " + err.Error())
	}
	return b
}

func newDecisionMsg(d limiter.Decision, instance string) decisionMsg {
	b := d.Bound()
	return decisionMsg{
		Type: "decision", Key: d.Key, Policy: d.Policy, Allowed: d.Allowed,
		Count: b.Count, Limit: b.Limit, NowMs: d.NowMs, OldestMs: oldest(b.OldestMs),
		RetryAfterMs: d.RetryAfterMs, ID: d.ID, Instance: instance,
	}
}

func newHelloMsg(instance, key string, p limiter.Policy, tickMs int64) helloMsg {
	m := helloMsg{Type: "hello", Instance: instance, Key: key, Policy: p.Name, TickMs: tickMs}
	for _, r := range p.Rules {
		m.Rules = append(m.Rules, policyRuleJSON{Limit: r.Limit, WindowMs: r.WindowMs()})
	}
	return m
}

// envelope carries an event between instances over Redis Pub/Sub.
type envelope struct {
	Origin string          `json:"o"`           // the instance that published it
	Kind   string          `json:"k"`           // decision, reset, race or presence
	Topic  string          `json:"t,omitempty"` // the window, for events
	Msg    json.RawMessage `json:"m,omitempty"` // the viewer message, as sent
	// Viewers maps topics to this instance's viewer count (presence).
	Viewers map[string]int `json:"v,omitempty"`
}
