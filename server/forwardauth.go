package server

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter/httplimit"
)

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
		o, bad := originalRequest(r)
		if bad != nil {
			return badRequest([]httplimit.FieldError{*bad})
		}
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
		if routes[i].matches(o) {
			return &routes[i]
		}
	}
	return nil
}

// routeKey joins the route's key sources' values with + through
// httplimit.JoinKey, which hashes each value outside [A-Za-z0-9._@/=-] or
// over 64 bytes, so two different lists of values never share a window; a
// source the request lacks is reported as missing. The route's keyLabel, when
// its policy is shared by routes keyed otherwise, leads the list, so that no
// value of one source is ever another source's key ("ip+203.0.113.7" and
// "header=X-Api-Key+203.0.113.7").
func routeKey(rt *route, r *http.Request, o original, trusted httplimit.TrustedProxies) (string, *httplimit.MissingKeyError, error) {
	parts := make([]string, 0, len(rt.key)+1)
	if rt.keyLabel != "" {
		parts = append(parts, rt.keyLabel)
	}
	for _, k := range rt.key {
		var v string
		switch k.kind {
		case "ip":
			ip, err := httplimit.ClientAddr(r, trusted)
			if err != nil {
				return "", nil, err
			}
			v = ip
		case "header":
			v = strings.TrimSpace(r.Header.Get(k.header))
			if v == "" {
				return "", &httplimit.MissingKeyError{Source: k.String(), Detail: "the request has no " + k.header + " header"}, nil
			}
		case "host":
			v = o.host
		case "path":
			v = o.path
		}
		if v == "" {
			return "", &httplimit.MissingKeyError{Source: k.String(), Detail: "the original request has no " + k.kind}, nil
		}
		parts = append(parts, v)
	}
	return httplimit.JoinKey(httplimit.JoinPlus, parts...), nil, nil
}
