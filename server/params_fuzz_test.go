package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
)

// FuzzCheckParams feeds arbitrary query strings and bodies to the check's
// parameter decoding: it must never panic, and every outcome is either valid
// parameters or a 400/413 problem that names a field.
func FuzzCheckParams(f *testing.F) {
	seeds := [][2]string{
		{"key=demo&policy=demo", ""},
		{"key=a%2Bb&cost=2", ""},
		{"", `{"key":"user:1","policy":"demo","cost":3}`},
		{"key=a", `{"key":"b"}`},
		{"key=a&key=b", ""},
		{"key=%zz", ""},
		{"", `{"key":5,"cost":"x"}`},
		{"", `{"cost":1e3,"key":"a"} {}`},
		{"cost=99999999999999999999", ""},
		{"", `[`},
		{"", strings.Repeat(" ", 10) + "{}"},
		{"policy=%00&key=%FF", `{"policy":null}`},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	cfg, err := buildSettings(Config{PolicySpecs: []string{"small=3/1m"}}, nil, nil, newMetrics(), time.Now())
	if err != nil {
		f.Fatal(err)
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, query, body string) {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/check", strings.NewReader(body))
		req.URL.RawQuery = query
		c := e.NewContext(req, httptest.NewRecorder())
		p, err := readParams(c, fieldKey, fieldPolicy, fieldCost)
		if err != nil {
			var pr *problem
			if !errors.As(err, &pr) || pr.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("readParams error %v", err)
			}
			return
		}
		key := p.key()
		pol := p.policy(cfg)
		cost := 1
		if !p.failed("policy") {
			cost = p.integer("cost", 1, 1, pol.SmallestLimit())
		}
		err = p.problem()
		if err == nil {
			if limiter.ValidateKey(key) != nil || cost < 1 || cost > pol.SmallestLimit() || pol.Name == "" {
				t.Fatalf("accepted key %q policy %q cost %d", key, pol.Name, cost)
			}
			return
		}
		var pr *problem
		if !errors.As(err, &pr) || pr.Status != http.StatusBadRequest || len(pr.Errors) == 0 {
			t.Fatalf("problem %+v", err)
		}
		for _, fe := range pr.Errors {
			if fe.Field == "" || fe.Detail == "" {
				t.Fatalf("unnamed error %+v", fe)
			}
		}
	})
}

// FuzzQueryFields: queryFields reads exactly what url.ParseQuery reads — each
// field's first value and how often it was given — and fails exactly when it
// fails.
func FuzzQueryFields(f *testing.F) {
	for _, s := range []string{"", "key=a&policy=b", "key=a&key=b", "key=%zz", "a;b=1", "key=a+b&cost=%2B1",
		"&&key&=x&cost=", "%6Bey=x", "key=a&x=%zz", "policy=p;x&key=k", "=&=="} {
		f.Add(s)
	}
	fields := []field{fieldKey, fieldPolicy, fieldCost}
	f.Fuzz(func(t *testing.T, raw string) {
		values := map[string]string{}
		counts, err := queryFields(raw, fields, values)
		want, wantErr := url.ParseQuery(raw)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, url.ParseQuery's %v", raw, err, wantErr)
		}
		for i, fl := range fields {
			vs := want[fl.name]
			if counts[i] != len(vs) {
				t.Fatalf("%q: %s given %d times, url.ParseQuery says %d", raw, fl.name, counts[i], len(vs))
			}
			if v, ok := values[fl.name]; ok != (len(vs) > 0) || (ok && v != vs[0]) {
				t.Fatalf("%q: %s = %q (%v), url.ParseQuery's first is %v", raw, fl.name, v, ok, vs)
			}
		}
	})
}

// FuzzBodyMembers: bodyMembers reads exactly what decodeObject reads — the
// same members, the last of a repeated name winning, the same raw values —
// and fails exactly when it fails, with its message.
func FuzzBodyMembers(f *testing.F) {
	for _, s := range []string{`{"key":"user:1","policy":"demo","cost":3}`, `{}`, ` { "a" : [1,{"b":"}"}] , "a":"x\"y" } `,
		`{"k\u0065y":"v"}`, `{"key":"\ud800"}`, "{\"key\":\"\xff\"}", `{"a":1} {}`, `[1]`, `null`, ``, `{"a":}`,
		`{"a":-1.5e3,"b":true,"c":null,"d":{"e":[]}}`, "\t{\"a\"\n:\r\"b\"}\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		got := map[string]string{}
		err := bodyMembers([]byte(body), func(name string, raw []byte) { got[name] = string(raw) })
		want, wantErr := decodeObject([]byte(body))
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("%q: error %v, decodeObject's %v", body, err, wantErr)
		}
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: members %q, decodeObject's %q", body, got, want)
		}
		for name, raw := range want {
			if g, ok := got[name]; !ok || g != string(raw) {
				t.Fatalf("%q: member %q = %q (%v), decodeObject's %q", body, name, g, ok, raw)
			}
			if len(raw) > 0 && raw[0] == '"' {
				var s string
				_ = json.Unmarshal(raw, &s)
				if js := jsonString(raw); js != s {
					t.Fatalf("%q: string %q read as %q, encoding/json's %q", body, raw, js, s)
				}
			}
		}
	})
}
