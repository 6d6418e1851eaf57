package httplimit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// sha256 of a value, its first 32 hex digits (python3 hashlib).
const (
	hashA65      = "sha256:635361c48bb9eab14198e76ea8ab7f1a" // "a" × 65
	hashSpaces   = "sha256:46eb331e1e2a2555fb3b14edfc1faba7" // "api key with spaces"
	hashAlicePlX = "sha256:a9deff79a9ad05fe02f6bd46c022dfda" // "alice+x"
)

func TestJoinKey(t *testing.T) {
	a64 := strings.Repeat("a", 64)
	for _, tc := range []struct {
		joiner byte
		values []string
		want   string
	}{
		{'+', []string{"203.0.113.7"}, "203.0.113.7"},
		{'+', []string{"203.0.113.7", "k1"}, "203.0.113.7+k1"},
		{'+', []string{"a=b/c@d.e_f-g"}, "a=b/c@d.e_f-g"},
		{'+', []string{a64}, a64},
		{'+', []string{strings.Repeat("a", 65)}, hashA65},
		{'+', []string{"api key with spaces"}, hashSpaces},
		{'+', []string{"alice+x", "y"}, hashAlicePlX + "+y"},
		{':', []string{"alice+x", "y"}, "alice+x:y"}, // + is in Envoy's alphabet
		{'+', []string{"user:42"}, hashOf(t, "user:42")},
		{':', []string{"t1", "u1"}, "t1:u1"},
		{':', []string{"t1:u1"}, hashOf(t, "t1:u1")},
		{'+', []string{"2001:db8:1:2::/64"}, hashOf(t, "2001:db8:1:2::/64")},
		// Two 64-byte values join to 129 bytes: the first is hashed, so the
		// key fits and still names both.
		{'+', []string{a64, strings.Repeat("b", 64)}, hashOf(t, a64) + "+" + strings.Repeat("b", 64)},
		{'+', []string{"x", strings.Repeat("b", 62), a64}, "x+" + strings.Repeat("b", 62) + "+" + hashOf(t, a64)},
		// The longest go first until the key fits: 60, then 50; 45 stays.
		{'+', []string{strings.Repeat("a", 50), strings.Repeat("b", 60), strings.Repeat("c", 45)},
			hashOf(t, strings.Repeat("a", 50)) + "+" + hashOf(t, strings.Repeat("b", 60)) + "+" + strings.Repeat("c", 45)},
	} {
		got := httplimit.JoinKey(tc.joiner, tc.values...)
		if got != tc.want {
			t.Errorf("JoinKey(%q, %q) = %q, want %q", tc.joiner, tc.values, got, tc.want)
		}
		if err := limiter.ValidateKey(got); err != nil {
			t.Errorf("JoinKey(%q, %q) = %q: %v", tc.joiner, tc.values, got, err)
		}
	}
	for _, in := range []string{"", "{braces}", "é", "tab\there", "semi;colon", "a+b", "a:b", "x y"} {
		got := httplimit.JoinKey('+', in)
		if !strings.HasPrefix(got, "sha256:") || len(got) != len("sha256:")+32 || limiter.ValidateKey(got) != nil {
			t.Errorf("JoinKey(+, %q) = %q, want sha256: and 32 hex digits", in, got)
		}
	}
	many := make([]string, 5)
	for i := range many {
		many[i] = strings.Repeat(string(rune('a'+i)), 64)
	}
	if got := httplimit.JoinKey('+', many...); limiter.ValidateKey(got) != nil || len(got) != len("sha256:")+32 {
		t.Errorf("five 64-byte values: %q, want one hash", got)
	}
}

// TestJoinKeyLinear: a key of 100,000 values, each long enough to be
// hashed one by one while the key does not fit, is built in time linear in
// them. Searching for the longest value before each hash took seconds for
// 64,000 (an Envoy descriptor's entries, before their number was bounded);
// linear, it takes milliseconds: the bound is generous.
func TestJoinKeyLinear(t *testing.T) {
	values := make([]string, 100_000)
	for i := range values {
		values[i] = fmt.Sprintf("k%06d=%s", i, strings.Repeat("v", 43)) // 50 bytes, kept alone
	}
	start := time.Now()
	got := httplimit.JoinKey(':', values...)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("JoinKey of %d values took %v, want well under 2 s", len(values), took)
	}
	if !strings.HasPrefix(got, "sha256:") || len(got) != len("sha256:")+32 {
		t.Fatalf("JoinKey of %d values = %q, want one hash", len(values), got)
	}
}

// hashOf is "sha256:" and the first 32 hex digits of v's SHA-256.
func hashOf(_ *testing.T, v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:])[:32]
}

// TestJoinKeyInjective: no two different lists of values share a key —
// with + whatever their lengths, with : for lists of one length (one
// descriptor mapping) — over values made of the characters that matter.
func TestJoinKeyInjective(t *testing.T) {
	atoms := []string{"", "a", "b", "+", ":", "a+b", "a:b", "sha256", " "}
	var values []string
	for _, x := range atoms {
		for _, y := range atoms {
			values = append(values, x+y)
		}
	}
	values = dedupe(values)
	lists := [][]string{}
	for _, a := range values {
		lists = append(lists, []string{a})
		for _, b := range values {
			lists = append(lists, []string{a, b})
		}
	}
	for _, joiner := range []byte{'+', ':'} {
		seen := map[string][]string{}
		for _, l := range lists {
			k := httplimit.JoinKey(joiner, l...)
			if limiter.ValidateKey(k) != nil {
				t.Fatalf("JoinKey(%q, %q) = %q is no valid key", joiner, l, k)
			}
			id := k
			if joiner == ':' {
				id = string(rune('0'+len(l))) + "|" + k
			}
			if prev, ok := seen[id]; ok {
				t.Fatalf("JoinKey(%q): %q and %q share the key %q", joiner, prev, l, k)
			}
			seen[id] = l
		}
	}
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range in {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
