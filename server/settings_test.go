package server

import (
	"strings"
	"testing"
	"time"
)

func mustSettings(t *testing.T, flags Config, file string) *settings {
	t.Helper()
	pf, err := parseFile([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	s, err := buildSettings(flags, pf, nil, newMetrics(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const envoyFile = `
policies:
  - {name: login, rules: [5/1m]}
  - {name: api, rules: [100/1s]}
envoy:
  - domain: edge
    descriptors:
      - keys: [remote_address]
        policy: login
      - keys: [generic_key, header_match]
        policy: api
  - domain: internal
    descriptors:
      - keys: [remote_address]
        policy: api
`

func TestEnvoyMappings(t *testing.T) {
	s := mustSettings(t, Config{}, envoyFile)
	for _, tc := range []struct {
		domain string
		keys   []string
		want   string
	}{
		{"edge", []string{"remote_address"}, "login"},
		{"edge", []string{"generic_key", "header_match"}, "api"},
		{"edge", []string{"header_match", "generic_key"}, ""}, // keys match in order
		{"edge", []string{"generic_key"}, ""},
		{"internal", []string{"remote_address"}, "api"},
		{"nowhere", []string{"remote_address"}, ""},
	} {
		got := ""
		if p, ok := s.envoyPolicy(tc.domain, tc.keys); ok {
			got = p.Name
		}
		if got != tc.want {
			t.Errorf("%s %v maps to %q, want %q", tc.domain, tc.keys, got, tc.want)
		}
	}
}

// TestVersion: the version follows the config in force, not the file's
// comments or layout, and flags count too.
func TestVersion(t *testing.T) {
	a := mustSettings(t, Config{}, envoyFile)
	b := mustSettings(t, Config{}, "# a comment\n"+strings.ReplaceAll(envoyFile, "{name: api, rules: [100/1s]}", "\n    name: api\n    rules: [\"100/1s\"]"))
	if a.version != b.version {
		t.Fatalf("equal configs, versions %s and %s", a.version, b.version)
	}
	c := mustSettings(t, Config{}, strings.Replace(envoyFile, "5/1m", "6/1m", 1))
	d := mustSettings(t, Config{PolicySpecs: []string{"x=1/1s"}}, envoyFile)
	e := mustSettings(t, Config{TrustedProxies: []string{"10.0.0.1"}}, envoyFile)
	for _, other := range []*settings{c, d, e} {
		if other.version == a.version {
			t.Fatalf("a different config has version %s too", a.version)
		}
	}
}

// TestFieldLines: validation errors name the field's line, also for fields
// left out (the nearest line that exists).
func TestFieldLines(t *testing.T) {
	pf, err := parseFile([]byte("routes:\n  - policy: demo\n  - match:\n      pathPrefix: /x\n    denyStatus: 99\n"))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{
		"routes":                      1,
		"routes[0]":                   2,
		"routes[0].policy":            2,
		"routes[1].match.pathPrefix":  4,
		"routes[1].denyStatus":        5,
		"routes[1].policy":            3, // absent: the route's own line
		"routes[7].policy":            1,
		"unmatched":                   0,
		"routes[1].match.methods[0]":  3,
		"routes[1].match.pathPrefix2": 3,
	} {
		if got := pf.line(path); got != want {
			t.Errorf("line(%s) = %d, want %d", path, got, want)
		}
	}
}
