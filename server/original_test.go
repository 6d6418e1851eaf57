package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestCanonical lists the spellings attackers use beside the canonical form
// each must reach: a route matches only this form, so a spelling that kept
// its own form would slip past its route.
func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		method, host, uri string
		want              original
	}{
		{"POST", "api.example.com", "/login", original{"POST", "api.example.com", "/login"}},
		{"post", "api.example.com", "/login", original{"POST", "api.example.com", "/login"}},
		{"PoSt", "API.Example.COM", "/login", original{"POST", "api.example.com", "/login"}},
		{"POST", "api.example.com.", "/login", original{"POST", "api.example.com", "/login"}},
		{"POST", "api.example.com:8443", "/login", original{"POST", "api.example.com", "/login"}},
		{"POST", "Api.Example.Com.:443", "/login", original{"POST", "api.example.com", "/login"}},
		{"POST", "[2001:DB8::1]:443", "/login", original{"POST", "2001:db8::1", "/login"}},
		{"POST", "[2001:db8::1]", "/login", original{"POST", "2001:db8::1", "/login"}},
		{"GET", "h", "/%6Cogin", original{"GET", "h", "/login"}},
		{"GET", "h", "/%6cogin", original{"GET", "h", "/login"}},
		{"GET", "h", "/%6C%6F%67%69%6E", original{"GET", "h", "/login"}},
		{"GET", "h", "//login", original{"GET", "h", "/login"}},
		{"GET", "h", "///login//x", original{"GET", "h", "/login/x"}},
		{"GET", "h", "/./login", original{"GET", "h", "/login"}},
		{"GET", "h", "/x/../login", original{"GET", "h", "/login"}},
		{"GET", "h", "/x/y/../../login", original{"GET", "h", "/login"}},
		{"GET", "h", "/../../login", original{"GET", "h", "/login"}},
		{"GET", "h", "/login;x", original{"GET", "h", "/login"}},
		{"GET", "h", "/login;jsessionid=1/x;y", original{"GET", "h", "/login/x"}},
		{"GET", "h", "/x/..;/login", original{"GET", "h", "/login"}},
		{"GET", "h", "/x/%2e%2e/login", original{"GET", "h", "/login"}},
		{"GET", "h", "/x/%2E%2E/login", original{"GET", "h", "/login"}},
		{"GET", "h", "/%2e/login", original{"GET", "h", "/login"}},
		{"GET", "h", "%2Flogin", original{"GET", "h", "/login"}},
		{"GET", "h", "/x%2F..%2Flogin", original{"GET", "h", "/login"}},
		{"GET", "h", "/%2F%2Flogin", original{"GET", "h", "/login"}},
		{"GET", "h", "/login%3Bx", original{"GET", "h", "/login"}},
		{"GET", "h", "/login?next=/home", original{"GET", "h", "/login"}},
		{"GET", "h", "/login#frag", original{"GET", "h", "/login"}},
		{"GET", "h", "/login%3Fx", original{"GET", "h", "/login?x"}},
		{"GET", "h", "/LOGIN", original{"GET", "h", "/LOGIN"}}, // case is the route's choice (ignoreCase)
		{"GET", "h", "/login/", original{"GET", "h", "/login/"}},
		{"GET", "h", "/login/.", original{"GET", "h", "/login/"}},
		{"GET", "h", "/login/x/..", original{"GET", "h", "/login/"}},
		{"GET", "h", "/%25zz", original{"GET", "h", "/%zz"}}, // decoded once
		{"GET", "h", "login", original{"GET", "h", "/login"}},
		{"GET", "h", "http://other/%6Cogin?x", original{"GET", "h", "/login"}},
		{"GET", "h", "", original{"GET", "h", "/"}},
		{"GET", "h", "/..", original{"GET", "h", "/"}},
	} {
		got, err := canonical(tc.method, tc.host, tc.uri)
		if err != nil || got != tc.want {
			t.Errorf("canonical(%q, %q, %q) = %+v, %v; want %+v", tc.method, tc.host, tc.uri, got, err, tc.want)
		}
	}
	for _, uri := range []string{"/%zzlogin", "/login%", "/login%2", "/%6", "/a%G0"} {
		if _, err := canonical("GET", "h", uri); !errors.Is(err, errBadEscape) {
			t.Errorf("canonical(%q): %v, want errBadEscape", uri, err)
		}
	}
}

// TestOriginalRequestForms: the headers and the /forward-auth/<path> prefix
// reach the same canonical request for the same spelling.
func TestOriginalRequestForms(t *testing.T) {
	for _, raw := range []string{"/%6Cogin", "//login", "/./login", "/x/../login", "/login;x", "/x/%2e%2e/login", "/x%2F..%2Flogin"} {
		h := httptest.NewRequest("GET", "/forward-auth", nil)
		h.Header.Set("X-Forwarded-Method", "post")
		h.Header.Set("X-Forwarded-Host", "API.example.com.")
		h.Header.Set("X-Forwarded-Uri", raw)
		p := httptest.NewRequest("POST", "/forward-auth"+raw, nil)
		p.Host = "api.example.com:8080"
		want := original{"POST", "api.example.com", "/login"}
		for name, r := range map[string]*http.Request{"headers": h, "prefix": p} {
			got, bad := originalRequest(r)
			if bad != nil || got != want {
				t.Errorf("%s %q: %+v %v, want %+v", name, raw, got, bad, want)
			}
		}
	}
	h := httptest.NewRequest("GET", "/forward-auth", nil)
	h.Header.Set("X-Forwarded-Uri", "/%zz")
	if _, bad := originalRequest(h); bad == nil || bad.Field != "X-Forwarded-Uri" {
		t.Errorf("malformed escape: %v, want a field error naming X-Forwarded-Uri", bad)
	}
}
