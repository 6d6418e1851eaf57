package httplimit

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratescope/ratescope/limiter"
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
			b.Locked, b.LockLevel = true, 1+r.IntN(20)
		}
		if r.IntN(2) == 0 {
			b.Override = "prefix:" + pick()
		}
		if r.IntN(2) == 0 { // a booking, and maybe the time it was held
			b.BookedMs, b.WaitedMs = r.Int64N(1<<50), r.Int64N(2)*r.Int64N(30000)
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
				if r.IntN(3) == 0 { // a calendar quota
					b.Rules[j].WindowMs, b.Rules[j].Period = 0, []limiter.Period{limiter.Day, limiter.Week, limiter.Month}[r.IntN(3)]
				}
			}
		}
		if r.IntN(3) == 0 {
			b.WindowMs, b.Period = 0, limiter.Month
		}
		if r.IntN(4) == 0 { // asked for with explain=1
			kth := r.Int64N(1 << 50)
			b.Explain = &Explanation{Outcome: pick(), Text: pick(), NowMs: r.Int64(), Rules: []RuleWhy{{Name: pick(), KthMs: &kth, Arithmetic: pick()}}}
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

// TestLockedDenial: the denial of a locked-out key says so — "locked": true
// and its "lockLevel" in the 429's problem document (the check API's and
// forward auth's), with the lock's remaining time as the retry — and a
// denial without a lock carries neither member.
func TestLockedDenial(t *testing.T) {
	d := limiter.Decision{
		Key: "alice", Policy: "login", NowMs: 1000, RetryAfterMs: 60000,
		Rules:  []limiter.RuleState{{Limit: 5, WindowMs: 60000, Count: 5, OldestMs: 500, Violated: true}},
		Locked: true, LockLevel: 3, LockUntilMs: 61000,
	}
	w := httptest.NewRecorder()
	writeDenied(w, 429, d, nil)
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if w.Code != 429 || body["locked"] != true || body["lockLevel"] != 3.0 || body["retryAfterMs"] != 60000.0 ||
		w.Header().Get("Retry-After") != "60" || !strings.Contains(body["detail"].(string), "locked") {
		t.Fatalf("a locked denial: %d %v %s", w.Code, w.Header(), w.Body)
	}
	if _, ok := body["lockUntilMs"]; ok {
		t.Errorf("the answer carries lockUntilMs, which only the stream's decision message does: %s", w.Body)
	}
	d.Locked, d.LockLevel, d.LockUntilMs = false, 0, 0
	w = httptest.NewRecorder()
	writeDenied(w, 429, d, nil)
	if strings.Contains(w.Body.String(), "lock") {
		t.Errorf("a denial without a lock mentions one: %s", w.Body)
	}
}
