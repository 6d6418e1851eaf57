package livebus_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/livebus"
)

// The envelope's wire form is what every instance and every Publisher must
// agree on: short member names, a batch as a JSON array, in order.
func TestEnvelopeEncoding(t *testing.T) {
	w := livebus.Window{Key: "alice", Policy: "demo"}
	decision := livebus.Envelope{Origin: "svc-1", Kind: livebus.KindDecision, Topic: w.Topic(), Msg: json.RawMessage(`{"type":"decision","id":"x"}`)}
	presence := livebus.Envelope{Origin: "srv-a", Kind: livebus.KindPresence, Topic: w.Topic(), Viewers: 2}
	for _, c := range []struct {
		env  livebus.Envelope
		want string
	}{
		{decision, `{"o":"svc-1","k":"decision","t":"demo|alice","m":{"type":"decision","id":"x"}}`},
		{presence, `{"o":"srv-a","k":"presence","t":"demo|alice","n":2}`},
		{livebus.Envelope{Origin: "srv-a", Kind: livebus.KindPresence, Topic: w.Topic()}, `{"o":"srv-a","k":"presence","t":"demo|alice"}`}, // its viewers left
	} {
		if got := string(c.env.Encode()); got != c.want {
			t.Errorf("Encode() = %s, want %s", got, c.want)
		}
	}

	one := livebus.AppendBatch(nil, [][]byte{decision.Encode()})
	if string(one) != string(decision.Encode()) {
		t.Errorf("a batch of one is %s, want the envelope itself", one)
	}
	many := livebus.AppendBatch([]byte("stale"), [][]byte{decision.Encode(), presence.Encode()})
	got, err := livebus.Decode(many[len("stale"):])
	if err != nil || !reflect.DeepEqual(got, []livebus.Envelope{decision, presence}) {
		t.Errorf("Decode(%s) = %+v, %v; want both envelopes, in order", many, got, err)
	}
	got, err = livebus.Decode(one)
	if err != nil || !reflect.DeepEqual(got, []livebus.Envelope{decision}) {
		t.Errorf("Decode(%s) = %+v, %v; want the one envelope", one, got, err)
	}
	for _, bad := range []string{`[not json`, `{"o":`, ``} {
		if got, err := livebus.Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) = %+v, want an error", bad, got)
		}
	}
}

func TestTopic(t *testing.T) {
	w := livebus.Window{Key: "10.0.0.0/64+k", Policy: "login"}
	if w.Topic() != "login|10.0.0.0/64+k" || livebus.ParseTopic(w.Topic()) != w {
		t.Errorf("Topic() = %q, parsed back %+v", w.Topic(), livebus.ParseTopic(w.Topic()))
	}
}

func TestDecisionMessage(t *testing.T) {
	d := limiter.Decision{
		Allowed: true, Key: "alice", Policy: "demo", Cost: 1, NowMs: 1000, ID: "id-1",
		Rules: []limiter.RuleState{{Limit: 5, WindowMs: 10000, Count: 1, Remaining: 4, OldestMs: 1000}},
	}
	denied := d
	denied.Allowed, denied.RetryAfterMs, denied.Cached = false, 250, true // nothing recorded: id null
	denied.Rules = []limiter.RuleState{{Limit: 5, WindowMs: 10000, Count: 5, OldestMs: -1}}
	wouldDeny := denied
	wouldDeny.Cached, wouldDeny.Shadow = false, true
	for _, c := range []struct {
		name string
		d    limiter.Decision
		want string
	}{
		{"allowed", d, `{"type":"decision","key":"alice","policy":"demo","allowed":true,"count":1,"limit":5,"nowMs":1000,"oldestMs":1000,"retryAfterMs":0,"id":"id-1","instance":"svc"}`},
		{"cached denial", denied, `{"type":"decision","key":"alice","policy":"demo","allowed":false,"count":5,"limit":5,"nowMs":1000,"oldestMs":null,"retryAfterMs":250,"id":null,"instance":"svc","cached":true}`},
		// A would-deny passes, as the check answers it (SPEC §9), marked.
		{"shadow would-deny", wouldDeny, `{"type":"decision","key":"alice","policy":"demo","allowed":true,"count":5,"limit":5,"nowMs":1000,"oldestMs":null,"retryAfterMs":250,"id":null,"instance":"svc","shadow":true,"wouldDeny":true}`},
	} {
		if got := string(livebus.DecisionMessage(c.d, "svc")); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
