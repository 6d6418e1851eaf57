package httplimit

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestAppendJSONMatchesMarshal: the hand encoders write exactly json.Marshal's
// bytes, for every member's presence and absence and for strings that need
// escaping.
func TestAppendJSONMatchesMarshal(t *testing.T) {
	strs := []string{"", "k-1", "login", "a\"b", `back\slash`, "<tag>&", "ünï", "tab\tnl\n", "\x00\x1f", "1.2.3.4"}
	r := rand.New(rand.NewPCG(1, 2))
	pick := func() string { return strs[r.IntN(len(strs))] }
	for i := range 2000 {
		b := DecisionBody{
			Allowed: r.IntN(2) == 0, Key: pick(), Policy: pick(),
			Count: r.IntN(200) - 5, Limit: r.IntN(100000), Remaining: r.IntN(50),
			WindowMs: r.Int64N(1 << 40), NowMs: r.Int64(), RetryAfterMs: r.Int64N(1e9) - 10,
			Cached: r.IntN(2) == 0, Shadow: r.IntN(2) == 0, WouldDeny: r.IntN(2) == 0,
		}
		if r.IntN(2) == 0 {
			v := r.Int64N(1 << 50)
			b.OldestMs = &v
		}
		if r.IntN(2) == 0 {
			s := pick()
			b.ID = &s
		}
		if n := r.IntN(4); n > 0 || r.IntN(2) == 0 {
			b.Rules = make([]RuleBody, n)
			for j := range b.Rules {
				b.Rules[j] = RuleBody{Limit: r.IntN(1000), WindowMs: r.Int64N(1e7), Count: r.IntN(1000), Remaining: r.IntN(1000)}
			}
		}
		check(t, i, b, b.AppendJSON([]byte("x"))[1:])
		d := DeniedBody{Type: pick(), Title: pick(), Status: 400 + r.IntN(200), Detail: pick(), DecisionBody: b}
		if n := r.IntN(3); n > 0 || r.IntN(2) == 0 {
			for range n {
				d.ViolatedPolicies = append(d.ViolatedPolicies, pick())
			}
		}
		check(t, i, d, d.AppendJSON(nil))
	}
}

func check(t *testing.T, i int, v any, got []byte) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("case %d:\n got %s\nwant %s", i, got, want)
	}
}
