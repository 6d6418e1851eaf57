// Package bus is the protocol ratescope instances speak to each other over
// Redis Pub/Sub, defined once: the channel, the envelope, how a batch of
// envelopes is encoded, the stream's message types (every kind a viewer
// reads, declared once in types.go), the decision message viewers receive,
// presence (which windows some instance's viewers watch), the outbox that
// publishes and the listener that subscribes. The live view (server/live) and
// livebus.Publisher both speak it; only the Publisher is public.
package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ratescope/ratescope/internal/redisdb"
)

// Channel is the classic Pub/Sub channel every instance on rdb's database
// publishes to and subscribes to (classic Pub/Sub works standalone, on a
// cluster and embedded): "ratescope:events:db<N>". Pub/Sub spans every
// database of a Redis, so the number keeps deployments on two databases of
// one server apart; a cluster has database 0 only.
func Channel(rdb Client) string { return redisdb.Channel("ratescope:events", rdb) }

// KindPresence is the kind of an envelope whose Viewers is the sender's
// viewer count of the window Topic names. Every other envelope carries an
// event for a window's viewers, and its kind is the type of the message it
// carries.
const KindPresence = "presence"

// Envelope carries one event between instances. A PUBLISH payload is one
// envelope or a JSON array of them, in order (AppendBatch, Decode).
type Envelope struct {
	Origin string          `json:"o"`           // the instance that published it
	Kind   string          `json:"k"`           // KindPresence, or the type of Msg
	Topic  string          `json:"t,omitempty"` // the window (Window.Topic), for events
	Msg    json.RawMessage `json:"m,omitempty"` // the viewer message, as viewers get it
	// Viewers is, in a presence envelope, the sender's viewer count of the
	// window Topic names (absent: 0, its viewers left). Every window has
	// envelopes of its own, never one listing them all (Presence).
	Viewers int `json:"n,omitempty"`
}

// Encode returns e as JSON, ready for AppendBatch.
func (e Envelope) Encode() []byte { return encode(e) }

// Window names one watched log: a client key under a policy. Only on the wire
// does it become a topic, "policy|key".
type Window struct {
	Key    string
	Policy string
}

// Topic is w as envelopes name it: "policy|key".
func (w Window) Topic() string { return w.Policy + "|" + w.Key }

// ParseTopic is the window a topic names.
func ParseTopic(topic string) Window {
	policy, key, _ := strings.Cut(topic, "|")
	return Window{Key: key, Policy: policy}
}

// AppendBatch appends items — encoded envelopes, or viewer messages — to dst
// as one payload: the item itself when there is one, else a JSON array of
// them, in order. PUBLISH payloads and WebSocket frames are both built so.
func AppendBatch(dst []byte, items [][]byte) []byte {
	if len(items) == 1 {
		return append(dst, items[0]...)
	}
	dst = append(dst, '[')
	for i, m := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m...)
	}
	return append(dst, ']')
}

// Decode reads a PUBLISH payload: one envelope or a JSON array of them.
func Decode(payload []byte) ([]Envelope, error) {
	if p := bytes.TrimLeft(payload, " \t\r\n"); len(p) > 0 && p[0] == '[' {
		var envs []Envelope
		if err := json.Unmarshal(p, &envs); err != nil {
			return nil, fmt.Errorf("failed to decode envelopes: %w", err)
		}
		return envs, nil
	}
	var e Envelope
	if err := json.Unmarshal(payload, &e); err != nil {
		return nil, fmt.Errorf("failed to decode an envelope: %w", err)
	}
	return []Envelope{e}, nil
}

// encode marshals a message or envelope; the types here cannot fail to encode.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("livebus: failed to encode: " + err.Error())
	}
	return b
}
