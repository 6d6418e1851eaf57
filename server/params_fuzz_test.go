package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
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
	cfg, err := buildSettings(Config{PolicySpecs: []string{"small=3/1m"}}, nil, newMetrics(), time.Now())
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
