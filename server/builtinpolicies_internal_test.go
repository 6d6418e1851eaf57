package server

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// TestParsePoliciesAddsTheBuiltIns: default and demo exist unless redefined,
// first and in that order; a redefinition takes their place, and the rest
// follow as given.
func TestParsePoliciesAddsTheBuiltIns(t *testing.T) {
	for _, tc := range []struct {
		specs []string
		want  string
	}{
		{nil, "default=10/1m demo=5/10s"},
		{[]string{"login=5/1m", "demo=3/5s", ""}, "default=10/1m demo=3/5s login=5/1m"},
		{[]string{"a=1/1s", "default=7/1h@gcra+shadow", "b=2/2s"}, "default=7/1h@gcra+shadow demo=5/10s a=1/1s b=2/2s"},
	} {
		ps, err := parsePolicies(tc.specs)
		if err != nil {
			t.Fatalf("%q: %v", tc.specs, err)
		}
		var got []string
		for _, p := range ps {
			got = append(got, p.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%q: got %q, want %q", tc.specs, strings.Join(got, " "), tc.want)
		}
	}
	for _, specs := range [][]string{{"demo=1/1s", "demo=2/2s"}, {"bad"}} {
		if _, err := parsePolicies(specs); err == nil {
			t.Errorf("%q: no error", specs)
		}
	}
}

// TestUsageNamesTheBuiltIns: --help says which policies exist unless
// redefined, in the form a policy is written.
func TestUsageNamesTheBuiltIns(t *testing.T) {
	var b bytes.Buffer
	printUsage(flag.NewFlagSet("ratescope", flag.ContinueOnError), &b)
	if want := "default=10/1m and demo=5/10s exist unless redefined."; !strings.Contains(b.String(), want) {
		t.Errorf("--help lacks %q:\n%s", want, b.String())
	}
}
