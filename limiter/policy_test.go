package limiter_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/limiter"
)

func TestParsePolicy(t *testing.T) {
	p, err := limiter.ParsePolicy("login=20/1h,5/1m")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "login" || len(p.Rules) != 2 ||
		p.Rules[0] != (limiter.Rule{Limit: 5, Window: time.Minute}) ||
		p.Rules[1] != (limiter.Rule{Limit: 20, Window: time.Hour}) {
		t.Fatalf("got %+v (rules sorted by window)", p)
	}
	if p.Longest() != time.Hour || p.SmallestLimit() != 5 || p.MaxCost() != 5 {
		t.Fatalf("longest %v smallest %d max cost %d", p.Longest(), p.SmallestLimit(), p.MaxCost())
	}
	if back, err := limiter.ParsePolicy(p.String()); err != nil || back.String() != p.String() {
		t.Fatalf("round trip %q: %v", p.String(), err)
	}
}

// TestMaxCost: a cost is at most the smallest limit and, for the log, which
// adds an entry per unit, at most 1,000.
func TestMaxCost(t *testing.T) {
	for s, want := range map[string]int{
		"big=100000/10s":               1000,
		"big=100000/10s@log":           1000,
		"mid=1000/10s,5000/1m":         1000,
		"small=999/10s,100000/1h":      999,
		"big=100000/10s@gcra":          100000,
		"big=10000000/10s,50/1s@fixed": 50,
	} {
		p, err := limiter.ParsePolicy(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.MaxCost(); got != want {
			t.Errorf("%s: MaxCost %d, want %d", s, got, want)
		}
	}
}

func TestParsePolicyAlgorithmAndShadow(t *testing.T) {
	for _, tc := range []struct {
		in        string
		algorithm limiter.Algorithm
		shadow    bool
		out       string
	}{
		{"login=5/1m,20/1h", limiter.Log, false, "login=5/1m,20/1h"},
		{"api=1000/1m@gcra", limiter.GCRA, false, "api=1000/1m@gcra"},
		{"search=50/10s+shadow", limiter.Log, true, "search=50/10s+shadow"},
		{"a=5/1s,9/1m@counter+shadow", limiter.Counter, true, "a=5/1s,9/1m@counter+shadow"},
		{" b = 7/2s @ bucket + shadow ", limiter.Bucket, true, "b=7/2s@bucket+shadow"},
		{"c=3/1s@log", limiter.Log, false, "c=3/1s"},
		{"d=10000000/168h@fixed", limiter.Fixed, false, "d=10000000/168h@fixed"},
		{"e=100000/1s", limiter.Log, false, "e=100000/1s"},
		// Options come in any order after the rules.
		{"f=5/1m+shadow@gcra", limiter.GCRA, true, "f=5/1m@gcra+shadow"},
		{"login=5/15m+lock=15m", limiter.Log, false, "login=5/15m+lock=15m"},
		{"g=5/1m+lock=90s@gcra+shadow", limiter.GCRA, true, "g=5/1m@gcra+shadow+lock=90s"},
		{"h=5/1m + lock = 24h", limiter.Log, false, "h=5/1m+lock=24h"},
	} {
		p, err := limiter.ParsePolicy(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if p.Algorithm != tc.algorithm || p.Shadow != tc.shadow || p.String() != tc.out {
			t.Errorf("%q: algorithm %q shadow %v string %q; want %q %v %q", tc.in, p.Algorithm, p.Shadow, p.String(), tc.algorithm, tc.shadow, tc.out)
		}
		if back, err := limiter.ParsePolicy(p.String()); err != nil || back.String() != p.String() || back.Algorithm != p.Algorithm || back.Shadow != p.Shadow {
			t.Errorf("round trip of %q: %+v %v", p.String(), back, err)
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"login", "want NAME=LIMIT/WINDOW"},
		{"Login=5/1m", "name"},
		{"=5/1m", "name"},
		{strings.Repeat("a", 33) + "=5/1m", "name"},
		{"login=5", "want LIMIT/WINDOW"},
		{"login=0/1m", "limit"},
		{"login=100001/1m", "limit"},
		{"login=x/1m", "limit"},
		{"login=5/1.5s", "whole seconds"},
		{"login=5/500ms", "whole seconds"},
		{"login=5/169h", "whole seconds"},
		{"login=5/forever", "Go duration"},
		{"login=5/1m,10/60s", "appears twice"},
		{"login=5/1m,", "want LIMIT/WINDOW"},
		{"login=5/1m@", `algorithm "" must be one of log, fixed, counter, gcra, bucket`},
		{"login=5/1m@sliding", `algorithm "sliding" must be one of`},
		{"login=5/1m@GCRA", `algorithm "GCRA"`},
		{"login=5/1m@gcra@log", `@ALGORITHM appears twice`},
		{"login=5/1m+", `suffix "+"`},
		{"login=5/1m+shadows", `suffix "+shadows"`},
		{"login=5/1m+shadow+shadow", `option +shadow appears twice`},
		{"login=5/1m+shadow=yes", `option "+shadow=yes": takes no value`},
		{"login=5/1m+lock", `option "+lock": want whole seconds from 1s to 24h`},
		{"login=5/1m+lock=0s", `option "+lock=0s"`},
		{"login=5/1m+lock=25h", `option "+lock=25h"`},
		{"login=5/1m+lock=1500ms", `option "+lock=1500ms"`},
		{"login=5/1m+lock=soon", `option "+lock=soon"`},
		{"login=5/1m+lock=1m+lock=2m", `option +lock appears twice`},
		{"login=100001/1m@log", "from 1 to 100000 for @log"},
		{"login=10000001/1m@gcra", "from 1 to 10000000 for @gcra"},
		{"login=0/1m@bucket", `rule "0/1m": limit must be a whole number from 1 to 10000000`},
		{"login=5/1m,5/60s@fixed", "appears twice"},
		{"login=@gcra", "want LIMIT/WINDOW"},
	} {
		_, err := limiter.ParsePolicy(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePolicy(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

// TestParsePolicies: the policies given, in order, and nothing else — a
// program's own defaults are its to add.
func TestParsePolicies(t *testing.T) {
	ps, err := limiter.ParsePolicies([]string{"login=5/1m", "demo=3/5s", ""})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.String())
	}
	want := "login=5/1m demo=3/5s"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %q, want %q", strings.Join(got, " "), want)
	}
	if _, err := limiter.ParsePolicies([]string{"a=1/1s", "a=2/2s"}); err == nil || !strings.Contains(err.Error(), `"a" is defined twice`) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := limiter.ParsePolicies([]string{"bad"}); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("malformed: %v", err)
	}
	if ps, err := limiter.ParsePolicies(nil); err != nil || len(ps) != 0 {
		t.Fatalf("no specs: %v, %v", ps, err)
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "user:42", "ip/10.0.0.1", "a+b=c@d_e-f.g", strings.Repeat("z", 128)} {
		if err := limiter.ValidateKey(k); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
	for _, k := range []string{"", " ", "a b", "{x}", "a\n", "ü", strings.Repeat("z", 129), "a;b", "a%b"} {
		if err := limiter.ValidateKey(k); err == nil {
			t.Errorf("%q: accepted", k)
		}
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"login=5/1m,20/1h", "demo=5/10s", "x=1/1s", "a=", "=", "a=1/0s", "a=99999999999999999999/1s",
		"api=1000/1m@gcra", "search=50/10s+shadow", "b=200000/1s@bucket+shadow", "c=1/1s@", "d=1/1s+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := limiter.ParsePolicy(s)
		if err != nil {
			return
		}
		if len(p.Rules) == 0 || p.SmallestLimit() < 1 || p.Longest() > limiter.MaxWindow || !slices.Contains(algorithms, p.Algorithm) {
			t.Fatalf("accepted %q as %+v", s, p)
		}
		for _, r := range p.Rules {
			if r.Limit > maxLimit(p.Algorithm) {
				t.Fatalf("accepted %q: limit %d over %d for %s", s, r.Limit, maxLimit(p.Algorithm), p.Algorithm)
			}
		}
		if back, err := limiter.ParsePolicy(p.String()); err != nil || back.String() != p.String() || back.Algorithm != p.Algorithm || back.Shadow != p.Shadow {
			t.Fatalf("round trip of %q: %v", s, err)
		}
	})
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"demo", "a b", "{x}", "user:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if limiter.ValidateKey(s) == nil && strings.ContainsAny(s, "{} \t\r\n") {
			t.Fatalf("accepted %q", s)
		}
	})
}
