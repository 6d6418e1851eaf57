package envoyconf_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/envoyconf"
)

// loadDir reads and parses a fixture folder.
func loadDir(t *testing.T, dir string, opts envoyconf.Options) *envoyconf.Set {
	t.Helper()
	files, err := envoyconf.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := envoyconf.Parse(files, opts)
	if err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	return s
}

func TestFeaturesLoad(t *testing.T) {
	s := loadDir(t, "testdata/features", envoyconf.Options{})
	if got, want := s.Files(), []string{"testdata/features/big.yaml", "testdata/features/edge.yaml", "testdata/features/messaging.yaml", "testdata/features/units.yaml"}; !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v (only *.yaml, no dot files, in name order)", got, want)
	}
	var got []string
	for _, p := range s.Policies() {
		got = append(got, p.String())
	}
	want := []string{
		"big.bulk=250000/24h@fixed",
		"big.small=100000/24h",
		"edge.remote_address=4/1m",
		"edge.remote_address_203.0.113.9=0/1m",
		"edge.path_/api/*/export=2/1h",
		"edge.path_/files/*=3/1h",
		"edge.path=1000/24h",
		"messaging.message_type_marketing.to_number=2/24h",
		"messaging.to_number=5/24h",
		"messaging.priority_high.to_number=3/24h",
		"messaging.tenant.user=1/1h+shadow",
		"messaging.quota_bucket=1/168h",
		"units.s=10/1s@fixed",
		"units.m=10/1m@fixed",
		"units.h=10/1h@fixed",
		"units.d=10/24h@fixed",
		"units.w=10/168h@fixed",
		"units.mo=10/720h@fixed",
		"units.y=4000000000/8760h@fixed",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("policies\n got %q\nwant %q", got, want)
	}
	if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], "big.yaml: descriptors[0].rate_limit.requests_per_unit: 250000 is more than the log keeps") {
		t.Fatalf("warnings %q", w)
	}
	var unlimited []string
	for _, l := range s.Limits() {
		if l.Unlimited {
			unlimited = append(unlimited, l.Policy.Name)
		}
	}
	if !slices.Equal(unlimited, []string{"edge.remote_address_198.51.100.1"}) {
		t.Fatalf("unlimited %v", unlimited)
	}
	domains := s.Domains()
	slices.Sort(domains)
	if !slices.Equal(domains, []string{"big", "edge", "messaging", "units"}) || s.Has("hidden") {
		t.Fatalf("domains %v", domains)
	}
}

func TestCompatDecidesByFixedWindows(t *testing.T) {
	s := loadDir(t, "testdata/features", envoyconf.Options{Compat: true})
	for _, p := range s.Policies() {
		if p.Algorithm != limiter.Fixed {
			t.Errorf("%s: algorithm %s under compat, want fixed", p.Name, p.Algorithm)
		}
	}
}

// TestLoadErrors loads each broken file beside the valid features: the
// whole set is refused, and the error names the file, the field, its line
// and what envoyproxy/ratelimit says of it.
func TestLoadErrors(t *testing.T) {
	cases := []struct{ file, want string }{
		{"bad_unit.yaml", `bad_unit.yaml: descriptors[0].rate_limit.unit (line 5): invalid rate limit unit "fortnight"`},
		{"bad_yaml.yaml", `bad_yaml.yaml: failed to read the YAML: line 2: did not find expected node content`},
		{"duplicate_key.yaml", `duplicate_key.yaml: descriptors[1] (line 6): duplicate descriptor composite key "shop.cart_big"`},
		{"duplicate_nested_key.yaml", `duplicate_nested_key.yaml: descriptors[0].descriptors[1] (line 6): duplicate descriptor composite key "shop.tenant.user"`},
		{"duplicate_domain.yaml", `duplicate_domain.yaml: domain (line 2): duplicate domain "edge": testdata/features/edge.yaml has it too`},
		{"empty_domain.yaml", `empty_domain.yaml: domain: the file cannot have an empty domain`},
		{"empty_file.yaml", `empty_file.yaml: domain: the file cannot have an empty domain`},
		{"empty_key.yaml", `empty_key.yaml: descriptors[0].key (line 3): descriptor has empty key`},
		{"unknown_key.yaml", `unknown_key.yaml: descriptors[0].ratelimit (line 4): unknown key "ratelimit"`},
		{"unknown_nested_key.yaml", `unknown_nested_key.yaml: descriptors[0].rate_limit.requests_per_minute (line 6): unknown key "requests_per_minute"`},
		{"list_of_scalars.yaml", `list_of_scalars.yaml: descriptors[0] (line 3): a list here holds mappings, not "cart"`},
		{"non_string_key.yaml", `non_string_key.yaml: descriptors[0] (line 4): key 1.5 is not a string`},
		{"replaces_empty.yaml", `replaces_empty.yaml: descriptors[0].rate_limit.replaces[0].name (line 9): should not have an empty replaces entry`},
		{"replaces_self.yaml", `replaces_self.yaml: descriptors[0].rate_limit.replaces[0].name (line 9): replaces should not contain name of same descriptor`},
		{"unlimited_with_unit.yaml", `unlimited_with_unit.yaml: descriptors[0].rate_limit.unit (line 6): should not specify rate limit unit when unlimited`},
		{"share_threshold_without_wildcard.yaml", `share_threshold_without_wildcard.yaml: descriptors[0].share_threshold (line 3): share_threshold can only be used with wildcard values (containing '*'), but found key "cart_big"`},
		{"fraction.yaml", `fraction.yaml: descriptors[0].rate_limit.requests_per_unit (line 4): 1.5 is a fraction`},
		{"negative.yaml", `negative.yaml: descriptors[0].rate_limit.requests_per_unit (line 4): want a whole number from 0 to 4294967295, not "-1"`},
		{"not_a_number.yaml", `not_a_number.yaml: descriptors[0].rate_limit.requests_per_unit (line 4): want a whole number from 0 to 4294967295, not the string "5"`},
		{"not_a_bool.yaml", `not_a_bool.yaml: descriptors[0].shadow_mode (line 4): want true or false, not "sometimes"`},
		{"wrong_shape.yaml", `wrong_shape.yaml: descriptors[0].rate_limit (line 4): want a mapping with unit and requests_per_unit, not a list`},
		{"not_a_mapping.yaml", `not_a_mapping.yaml (line 1): the file must be a mapping with domain and descriptors, not a list`},
		{"bad_algorithm.yaml", `bad_algorithm.yaml: algorithm (line 2): "tokenbucket" is not an algorithm; want one of ` + limiter.AlgorithmNames()},
		{"nested_algorithm.yaml", `nested_algorithm.yaml: descriptors[0].algorithm (line 4): unknown key "algorithm"`},
		{"log_too_big.yaml", `log_too_big.yaml: descriptors[0].rate_limit.requests_per_unit (line 5): 100001 is more than the log keeps (100000)`},
		{"gcra_too_long.yaml", `gcra_too_long.yaml: descriptors[0].rate_limit.unit (line 5): month is longer than gcra takes (a week)`},
		{"same_name.yaml", `same_name.yaml: descriptors[0] (line 4): the limit's name "messaging.message_type_marketing.to_number" is also a limit's name in testdata/features/messaging.yaml`},
	}
	base, err := envoyconf.ReadDir("testdata/features")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("testdata/errors")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(cases) {
		t.Fatalf("%d fixtures in testdata/errors, %d cases: give each fixture a case", len(entries), len(cases))
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("testdata/errors", c.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			files := append(slices.Clone(base), envoyconf.File{Name: path, Data: data})
			s, err := envoyconf.Parse(files, envoyconf.Options{})
			if err == nil {
				t.Fatalf("loaded %d policies; want an error", len(s.Policies()))
			}
			if !strings.Contains(err.Error(), "testdata/errors/"+c.want) {
				t.Fatalf("error\n%v\nwant it to contain\n%s", err, c.want)
			}
		})
	}
}

// TestErrorsAreAllReported: one load lists every problem of every file, so
// fixing a set takes one round.
func TestErrorsAreAllReported(t *testing.T) {
	_, err := envoyconf.Parse([]envoyconf.File{
		{Name: "a.yaml", Data: []byte("domain: a\ndescriptors:\n  - key: x\n    rate_limit: {requests_per_unit: 3}\n  - value: y\n")},
		{Name: "b.yaml", Data: []byte("domain: b\ndescriptors:\n  - key: x\n    rate_limit: {unit: eon, requests_per_unit: 1}\n")},
	}, envoyconf.Options{})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`a.yaml: descriptors[0].rate_limit.unit (line 4): invalid rate limit unit ""`,
		`a.yaml: descriptors[1].key (line 5): descriptor has empty key`,
		`b.yaml: descriptors[0].rate_limit.unit (line 4): invalid rate limit unit "eon"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestLenientAsEnvoyproxy: what envoyproxy/ratelimit's YAML reading takes,
// ratescope takes too: scalars as strings, known keys out of place, merge
// keys, an unlimited limit with an unknown unit, a limit of no requests.
func TestLenientAsEnvoyproxy(t *testing.T) {
	s, err := envoyconf.Parse([]envoyconf.File{{Name: "lenient.yaml", Data: []byte(`
domain: lenient
defaults: &d {unit: hour, requests_per_unit: 7}
descriptors:
  - key: 42
    value: true
    unit: second            # known key, meaningless here: ignored
    rate_limit:
      <<: *d
      requests_per_unit: 8
  - key: free
    rate_limit: {unlimited: true, unit: never}
  - key: zero
    rate_limit: {unit: second}
  - key: shh
    shadow_mode: yes
    rate_limit: {unit: minute, requests_per_unit: 0x10}
`)}}, envoyconf.Options{})
	if err == nil {
		t.Fatal("defaults: is not a known key; want an error")
	}
	if !strings.Contains(err.Error(), `lenient.yaml: defaults (line 3): unknown key "defaults"`) {
		t.Fatal(err)
	}
	s, err = envoyconf.Parse([]envoyconf.File{{Name: "lenient.yaml", Data: []byte(`
domain: overwritten
domain: lenient             # of a key written twice, the last counts
descriptors:
  - key: 42
    value: true
    unit: second            # known key, meaningless here: ignored
    rate_limit: &d
      unit: hour
      requests_per_unit: 8
  - key: again
    rate_limit:
      <<: *d
      requests_per_unit: 9
  - key: free
    rate_limit: {unlimited: true, unit: never}
  - key: zero
    rate_limit: {unit: second}
  - key: shh
    shadow_mode: yes
    rate_limit: {unit: minute, requests_per_unit: 0x10}
`)}}, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range s.Policies() {
		got = append(got, p.String())
	}
	want := []string{"lenient.42_true=8/1h", "lenient.again=9/1h", "lenient.zero=0/1s", "lenient.shh=16/1m+shadow"}
	if !slices.Equal(got, want) {
		t.Fatalf("policies %q, want %q", got, want)
	}
}

func TestUnitLength(t *testing.T) {
	for u, want := range map[envoyconf.Unit]time.Duration{
		rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second,
		rlsv3.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
		rlsv3.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
		rlsv3.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
	} {
		if got, ok := envoyconf.UnitLength(u); !ok || got != want {
			t.Errorf("%s: %s %v, want %s", u, got, ok, want)
		}
	}
	if _, ok := envoyconf.UnitLength(0); ok {
		t.Error("UNKNOWN has a length")
	}
}

func TestReadDirMissing(t *testing.T) {
	if _, err := envoyconf.ReadDir(filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "failed to read the envoy config dir") {
		t.Fatalf("err %v", err)
	}
}

func TestDigest(t *testing.T) {
	a := []envoyconf.File{{Name: "a.yaml", Data: []byte("x")}}
	b := []envoyconf.File{{Name: "a.yaml", Data: []byte("y")}}
	c := []envoyconf.File{{Name: "a.yamlx", Data: nil}}
	if envoyconf.Digest(a) == envoyconf.Digest(b) || envoyconf.Digest(a) == envoyconf.Digest(c) || envoyconf.Digest(a) != envoyconf.Digest(slices.Clone(a)) {
		t.Fatal("digest does not tell files apart")
	}
}

// TestSetDigest: what the files say decides the digest, not their layout;
// a descriptor moved a level down changes it.
func TestSetDigest(t *testing.T) {
	digest := func(data string) string {
		t.Helper()
		s, err := envoyconf.Parse([]envoyconf.File{{Name: "a.yaml", Data: []byte(data)}}, envoyconf.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Digest()
	}
	flat := digest("domain: a\ndescriptors: [{key: k, descriptors: [{key: u, rate_limit: {unit: second, requests_per_unit: 1}}]}, {key: v}]\n")
	block := digest("# the same\ndomain: a\ndescriptors:\n  - key: k\n    descriptors:\n      - key: u\n        rate_limit:\n          unit: second\n          requests_per_unit: 1\n  - key: v\n")
	deeper := digest("domain: a\ndescriptors: [{key: k, descriptors: [{key: u, rate_limit: {unit: second, requests_per_unit: 1}, descriptors: [{key: v}]}]}]\n")
	if flat != block || flat == deeper {
		t.Fatalf("digests %s, %s (the same files), %s (v a level down)", flat, block, deeper)
	}
}
