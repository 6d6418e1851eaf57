package limiter_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/redistest"
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
		// A quota's limit bounds the cost as a window's does.
		"q=20/1s,10/day":             10,
		"q=100000/1s,500/month@gcra": 500,
		"q=5000000/month":            1000,
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

// TestQuotaPolicy: quota rules keep no window — a policy of quotas alone
// has no longest window — and their limit is up to MaxLimit under any
// algorithm, the log's too.
func TestQuotaPolicy(t *testing.T) {
	p, err := limiter.ParsePolicy("q=100/1m,1000000/month,50/day+tz=Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	want := []limiter.Rule{{Limit: 100, Window: time.Minute}, {Limit: 50, Period: limiter.Day}, {Limit: 1000000, Period: limiter.Month}}
	if !slices.Equal(p.Rules, want) || p.Longest() != time.Minute || p.Timezone != "Europe/Berlin" || !p.HasQuotas() {
		t.Fatalf("got %+v, longest %v", p, p.Longest())
	}
	if loc, err := p.Location(); err != nil || loc.String() != "Europe/Berlin" {
		t.Fatalf("location %v, %v", loc, err)
	}
	only, err := limiter.ParsePolicy("o=5/week")
	if err != nil || only.Longest() != 0 || only.HasQuotas() != true || only.Rules[0].WindowMs() != 0 {
		t.Fatalf("quotas alone: %+v %v", only, err)
	}
	if loc, err := only.Location(); err != nil || loc != time.UTC {
		t.Fatalf("default zone %v, %v", loc, err)
	}
	if _, err := (limiter.Policy{Name: "x", Timezone: "Nowhere/Else"}).Location(); err == nil {
		t.Fatal("a hand-built policy's bad zone: no error")
	}
}

// TestQuotaPolicyBuiltByHand: a Policy built in Go with a zone or a period
// no parse would accept is an error of the check, never a guess.
func TestQuotaPolicyBuiltByHand(t *testing.T) {
	lim := limiter.New(newClient(t, redistest.URL(t)), limiter.WithDenyCache(0))
	for _, p := range []limiter.Policy{
		{Name: "x", Rules: []limiter.Rule{{Limit: 5, Period: limiter.Day}}, Timezone: "Nowhere/Else"},
		{Name: "y", Rules: []limiter.Rule{{Limit: 5, Period: "year"}}},
	} {
		if d, err := lim.Allow(context.Background(), "k", p, 1); err == nil {
			t.Errorf("%+v: %+v, want an error", p, d)
		}
		if _, err := lim.Window(context.Background(), "k", p); err == nil {
			t.Errorf("%+v: a window, want an error", p)
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
		// Whole days, as people write them: sliding days.
		{"i=5/1d,20/7d", limiter.Log, false, "i=5/24h,20/168h"},
		// Calendar quotas: after the windows, day, week, month; a zone.
		{"api=100000/month,10/1s+tz=America/New_York", limiter.Log, false, "api=10/1s,100000/month+tz=America/New_York"},
		{"i=5/month,3/week,2/day,9/1h@gcra", limiter.GCRA, false, "i=9/1h,2/day,3/week,5/month@gcra"},
		{"j=10000000/month", limiter.Log, false, "j=10000000/month"},
		{"k=5/day+tz=Etc/GMT+5+shadow", limiter.Log, true, "k=5/day+shadow+tz=Etc/GMT+5"},
		{"l=5/day+tz=UTC@fixed+lock=1m", limiter.Fixed, false, "l=5/day@fixed+lock=1m+tz=UTC"},
		{"m=5/1s,5/day,5/24h", limiter.Log, false, "m=5/1s,5/24h,5/day"},
		{"n=5/1s+tz=Asia/Kolkata", limiter.Log, false, "n=5/1s+tz=Asia/Kolkata"},
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
		{"login=5/8d", `window must be`},
		{"login=5/0d", `window must be`},
		{"login=100001/1m@log", "from 1 to 100000 for @log"},
		{"login=10000001/1m@gcra", "from 1 to 10000000 for @gcra"},
		{"login=0/1m@bucket", `rule "0/1m": limit must be a whole number from 1 to 10000000`},
		{"login=5/1m,5/60s@fixed", "appears twice"},
		{"login=@gcra", "want LIMIT/WINDOW"},
		{"q=5/day,6/day", "period day appears twice"},
		{"q=10000001/month", `rule "10000001/month": limit must be a whole number from 1 to 10000000`},
		{"q=0/week", "limit must be"},
		{"q=5/Day", "one of day, week, month"},
		{"q=5/year", "one of day, week, month"},
		{"q=5/day+tz", `option "+tz": want an IANA time zone`},
		{"q=5/day+tz=", `option "+tz=": want an IANA time zone`},
		{"q=5/day+tz=Mars/Olympus", `time zone "Mars/Olympus": want an IANA zone name`},
		{"q=5/day+tz=Local", `differs from machine to machine`},
		{"q=5/day+tz=../etc/passwd", `time zone "../etc/passwd"`},
		{"q=5/day+tz=UTC+tz=UTC", "option +tz appears twice"},
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
