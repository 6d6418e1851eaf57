package bus_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/internal/bus"
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// The envelope's wire form is what every instance and every Publisher must
// agree on: short member names, a batch as a JSON array, in order.
func TestEnvelopeEncoding(t *testing.T) {
	w := bus.Window{Key: "alice", Policy: "demo"}
	decision := bus.Envelope{Origin: "svc-1", Kind: bus.TypeDecision, Topic: w.Topic(), Msg: json.RawMessage(`{"type":"decision","id":"x"}`)}
	presence := bus.Envelope{Origin: "srv-a", Kind: bus.KindPresence, Topic: w.Topic(), Viewers: 2}
	for _, c := range []struct {
		env  bus.Envelope
		want string
	}{
		{decision, `{"o":"svc-1","k":"decision","t":"demo|alice","m":{"type":"decision","id":"x"}}`},
		{presence, `{"o":"srv-a","k":"presence","t":"demo|alice","n":2}`},
		{bus.Envelope{Origin: "srv-a", Kind: bus.KindPresence, Topic: w.Topic()}, `{"o":"srv-a","k":"presence","t":"demo|alice"}`}, // its viewers left
	} {
		if got := string(c.env.Encode()); got != c.want {
			t.Errorf("Encode() = %s, want %s", got, c.want)
		}
	}

	one := bus.AppendBatch(nil, [][]byte{decision.Encode()})
	if string(one) != string(decision.Encode()) {
		t.Errorf("a batch of one is %s, want the envelope itself", one)
	}
	many := bus.AppendBatch([]byte("stale"), [][]byte{decision.Encode(), presence.Encode()})
	got, err := bus.Decode(many[len("stale"):])
	if err != nil || !reflect.DeepEqual(got, []bus.Envelope{decision, presence}) {
		t.Errorf("Decode(%s) = %+v, %v; want both envelopes, in order", many, got, err)
	}
	got, err = bus.Decode(one)
	if err != nil || !reflect.DeepEqual(got, []bus.Envelope{decision}) {
		t.Errorf("Decode(%s) = %+v, %v; want the one envelope", one, got, err)
	}
	for _, bad := range []string{`[not json`, `{"o":`, ``} {
		if got, err := bus.Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) = %+v, want an error", bad, got)
		}
	}
}

func TestTopic(t *testing.T) {
	w := bus.Window{Key: "10.0.0.0/64+k", Policy: "login"}
	if w.Topic() != "login|10.0.0.0/64+k" || bus.ParseTopic(w.Topic()) != w {
		t.Errorf("Topic() = %q, parsed back %+v", w.Topic(), bus.ParseTopic(w.Topic()))
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
	locked := denied
	locked.Cached, locked.RetryAfterMs = false, 30000
	locked.Locked, locked.LockLevel, locked.LockUntilMs = true, 2, 31000
	for _, c := range []struct {
		name string
		d    limiter.Decision
		want string
	}{
		{"allowed", d, `{"type":"decision","allowed":true,"key":"alice","policy":"demo","count":1,"limit":5,"remaining":4,"windowMs":10000,"nowMs":1000,"oldestMs":1000,"retryAfterMs":0,"id":"id-1","rules":[{"limit":5,"windowMs":10000,"count":1,"remaining":4}]EXPLAIN,"instance":"svc"}`},
		{"cached denial", denied, `{"type":"decision","allowed":false,"key":"alice","policy":"demo","count":5,"limit":5,"remaining":0,"windowMs":10000,"nowMs":1000,"oldestMs":null,"retryAfterMs":250,"id":null,"rules":[{"limit":5,"windowMs":10000,"count":5,"remaining":0}],"cached":trueEXPLAIN,"instance":"svc"}`},
		// A would-deny passes, as the check answers it (SPEC §9), marked.
		// A locked-out key: the answer's lock members, and when the lock ends for the page.
		{"locked", locked, `{"type":"decision","allowed":false,"key":"alice","policy":"demo","count":5,"limit":5,"remaining":0,"windowMs":10000,"nowMs":1000,"oldestMs":null,"retryAfterMs":30000,"id":null,"rules":[{"limit":5,"windowMs":10000,"count":5,"remaining":0}],"locked":true,"lockLevel":2EXPLAIN,"lockUntilMs":31000,"instance":"svc"}`},
		{"shadow would-deny", wouldDeny, `{"type":"decision","allowed":true,"key":"alice","policy":"demo","count":5,"limit":5,"remaining":0,"windowMs":10000,"nowMs":1000,"oldestMs":null,"retryAfterMs":250,"id":null,"rules":[{"limit":5,"windowMs":10000,"count":5,"remaining":0}],"shadow":true,"wouldDeny":trueEXPLAIN,"instance":"svc"}`},
	} {
		// Each carries its explanation's numbers, for the page.
		lean, err := json.Marshal(httplimit.Lean(c.d))
		if err != nil {
			t.Fatal(err)
		}
		c.want = strings.Replace(c.want, "EXPLAIN", `,"explain":`+string(lean), 1)
		if got := string(bus.DecisionMessage(c.d, "svc")); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
		// One shape: the message is the check's answer with a type and an instance.
		var msg, answer map[string]any
		if err := json.Unmarshal(bus.DecisionMessage(c.d, "svc"), &msg); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(httplimit.NewDecisionBody(c.d).AppendJSON(nil), &answer); err != nil {
			t.Fatal(err)
		}
		delete(msg, "type")
		delete(msg, "instance")
		delete(msg, "lockUntilMs")
		delete(msg, "explain") // an answer's only when asked: explain=1
		if !reflect.DeepEqual(msg, answer) {
			t.Errorf("%s: the message carries %v, the check answers %v", c.name, msg, answer)
		}
	}
}
