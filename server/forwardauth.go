package server

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter/httplimit"
)

// forwardAuthPrefix is where proxies ask "may this request pass?"; under it,
// the rest of the path is the original request's (Envoy ext_authz's
// path_prefix).
const forwardAuthPrefix = "/forward-auth"

// original is the request a proxy asks about.
type original struct {
	method, host, path string
}

// originalRequest reads the request a proxy asks about: X-Forwarded-Method,
// -Host and -Uri when present, else this request's own method, Host and
// (under the prefix) path.
func originalRequest(r *http.Request) original {
	o := original{method: r.Method, host: r.Host, path: "/"}
	if v := r.Header.Get("X-Forwarded-Method"); v != "" {
		o.method = strings.ToUpper(strings.TrimSpace(v))
	}
	if v := r.Header.Get("X-Forwarded-Host"); v != "" {
		first, _, _ := strings.Cut(v, ",") // a chain of proxies: the first saw the client's
		o.host = strings.TrimSpace(first)
	}
	if v := r.Header.Get("X-Forwarded-Uri"); v != "" {
		o.path = v
	} else if rest, ok := strings.CutPrefix(r.URL.Path, forwardAuthPrefix); ok && rest != "" {
		o.path = rest
		if r.URL.RawQuery != "" {
			o.path += "?" + r.URL.RawQuery
		}
	}
	o.path, _, _ = strings.Cut(o.path, "?")
	return o
}

// handleForwardAuth answers a reverse proxy's "may this request pass?"
// (SPEC §7): ANY /forward-auth[/<path>]. The first route matching the
// original request decides its policy, key and cost; the decision is an
// ordinary check through the same Checker as the check API.
func handleForwardAuth(store *configStore, checker *httplimit.Checker) echo.HandlerFunc {
	return func(c echo.Context) error {
		set := store.load()
		r := c.Request()
		if !set.trusted.Empty() && !set.trusted.TrustsPeer(r) {
			return newProblem(http.StatusForbidden, "forward auth answers only the trusted proxies; see trustedProxies")
		}
		o := originalRequest(r)
		rt := matchRoute(set.routes, o)
		if rt == nil {
			if set.unmatched == "deny" {
				return newProblem(http.StatusForbidden, "no route matches "+o.method+" "+truncate(o.host+o.path, 200)+" and unmatched requests are denied")
			}
			return c.NoContent(http.StatusOK)
		}
		key, missing, err := routeKey(rt, r, o, set.trusted)
		if err != nil {
			return badRequest([]httplimit.FieldError{{Field: "key", Detail: err.Error()}})
		}
		if missing != nil {
			if rt.missingOK {
				return c.NoContent(http.StatusOK)
			}
			return badRequest([]httplimit.FieldError{{Field: missing.Source, Detail: missing.Detail}})
		}
		res := checker.CheckHTTP(c.Response(), r, httplimit.Target{Key: key, Policy: rt.policy.Policy, Cost: rt.cost, DenyStatus: rt.denyStatus})
		if res.Pass {
			return c.NoContent(http.StatusOK) // allowed (with RateLimit fields) or failed open
		}
		return nil
	}
}

func matchRoute(routes []route, o original) *route {
	for i := range routes {
		if routes[i].matches(o.method, o.host, o.path) {
			return &routes[i]
		}
	}
	return nil
}

// routeKey joins the route's key sources' values with +. Each value outside
// the key alphabet or over 64 bytes is hashed (httplimit.KeyValue); a source
// the request lacks is reported as missing.
func routeKey(rt *route, r *http.Request, o original, trusted httplimit.TrustedProxies) (string, *httplimit.MissingKeyError, error) {
	parts := make([]string, 0, len(rt.key))
	for _, k := range rt.key {
		var v string
		switch k.kind {
		case "ip":
			ip, err := httplimit.ClientAddr(r, trusted)
			if err != nil {
				return "", nil, err
			}
			parts = append(parts, ip)
			continue
		case "header":
			v = strings.TrimSpace(r.Header.Get(k.header))
			if v == "" {
				return "", &httplimit.MissingKeyError{Source: k.String(), Detail: "the request has no " + k.header + " header"}, nil
			}
		case "host":
			v = strings.ToLower(o.host)
		case "path":
			v = o.path
		}
		if v == "" {
			return "", &httplimit.MissingKeyError{Source: k.String(), Detail: "the original request has no " + k.kind}, nil
		}
		parts = append(parts, httplimit.KeyValue(v))
	}
	return httplimit.JoinKey(parts...), nil, nil
}
