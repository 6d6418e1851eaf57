package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/ratescope/ratescope/limiter"
)

// route is one forward-auth route of the config file: which original
// requests it matches and how it limits them.
type route struct {
	host       string   // canonical (canonicalHost); empty: any
	methods    []string // upper case; empty: any
	pathPrefix string   // canonical (canonicalPath), lower case with ignoreCase; empty: any
	ignoreCase bool     // the path prefix matches in any letter case
	policy     *policyEntry
	key        []keySource
	cost       int
	denyStatus int
	missingOK  bool // missingKey: allow — a request lacking a key source passes unlimited
	// keyLabel leads the client key when the policy's routes key by
	// different sources (namespaceKeys); empty, the key is the values alone.
	keyLabel string
}

// keySource is one part of a route's client key.
type keySource struct {
	kind   string // ip, header, host or path
	header string // for header: its name
}

func (k keySource) String() string {
	if k.kind == "header" {
		return "header:" + k.header
	}
	return k.kind
}

func (r route) String() string {
	keys := make([]string, len(r.key))
	for i, k := range r.key {
		keys[i] = k.String()
	}
	return fmt.Sprintf("host=%s methods=%s prefix=%s ignoreCase=%t policy=%s key=%s cost=%d deny=%d missingOK=%t",
		r.host, strings.Join(r.methods, ","), r.pathPrefix, r.ignoreCase, r.policy.Name, strings.Join(keys, "+"), r.cost, r.denyStatus, r.missingOK)
}

// matches reports whether the original request, in canonical form, fits the
// route.
func (r *route) matches(o original) bool {
	if r.host != "" && r.host != o.host {
		return false
	}
	if len(r.methods) > 0 && !r.matchesMethod(o.method) {
		return false
	}
	if r.ignoreCase {
		return strings.HasPrefix(strings.ToLower(o.path), r.pathPrefix)
	}
	return strings.HasPrefix(o.path, r.pathPrefix)
}

// matchesMethod reports whether the route lists method, a HEAD counting as
// the GET it is without the body (RFC 9110 section 9.3.2): a backend answers
// HEAD with its GET handler, so a route for GET that let HEAD by would let
// the same work through unlimited.
func (r *route) matchesMethod(method string) bool {
	return slices.Contains(r.methods, method) || method == http.MethodHead && slices.Contains(r.methods, http.MethodGet)
}

// buildRoute validates one file route against the settings' policies.
func buildRoute(fr fileRoute, s *settings, file *parsedFile, path string) (route, error) {
	r := route{
		host:       canonicalHost(fr.Match.Host),
		ignoreCase: fr.IgnoreCase,
		cost:       1,
		denyStatus: http.StatusTooManyRequests,
	}
	for i, m := range fr.Match.Methods {
		if m == "" || !isToken(m) {
			return route{}, file.fieldErr(fmt.Sprintf("%s.match.methods[%d]", path, i), "%q is not an HTTP method", m)
		}
		r.methods = append(r.methods, strings.ToUpper(m))
	}
	if pp := fr.Match.PathPrefix; pp != "" {
		if !strings.HasPrefix(pp, "/") {
			return route{}, file.fieldErr(path+".match.pathPrefix", "%q must start with /", pp)
		}
		// Requests are matched in canonical form, so the prefix is put in it
		// too: "/api//v1/" and "/api/%761/" both mean "/api/v1/".
		c, err := canonicalPath(pp)
		if err != nil || strings.ContainsAny(pp, "?#") {
			return route{}, file.fieldErr(path+".match.pathPrefix", "%q: want a path without query or malformed escapes", pp)
		}
		r.pathPrefix = c
		if r.ignoreCase {
			r.pathPrefix = strings.ToLower(c)
		}
	}
	if fr.Policy == "" {
		return route{}, file.fieldErr(path+".policy", "is required")
	}
	p, ok := s.policy(fr.Policy)
	if !ok {
		return route{}, file.fieldErr(path+".policy", "unknown policy %q", fr.Policy)
	}
	if p.InFlight() {
		return route{}, file.fieldErr(path+".policy", "policy %q limits requests in flight: forward auth answers before a request runs and never hears it end, so it cannot hold a lease; use a window policy", fr.Policy)
	}
	r.policy = p
	spec := fr.Key
	if spec == "" {
		spec = "ip"
	}
	for part := range strings.SplitSeq(spec, "+") {
		k, err := parseKeySource(strings.TrimSpace(part))
		if err != nil {
			return route{}, file.fieldErr(path+".key", "%v", err)
		}
		r.key = append(r.key, k)
	}
	if fr.Cost != nil {
		r.cost = *fr.Cost
		if r.cost < 1 || r.cost > p.MaxCost() {
			return route{}, file.fieldErr(path+".cost", "%d: must be from 1 to %d for policy %q (its smallest limit, and at most %d for log)", r.cost, p.MaxCost(), p.Name, limiter.MaxLogCost)
		}
	}
	if fr.DenyStatus != 0 {
		if fr.DenyStatus < 400 || fr.DenyStatus > 599 {
			return route{}, file.fieldErr(path+".denyStatus", "%d: want a 4xx or 5xx status such as 429 (or 403 for nginx)", fr.DenyStatus)
		}
		r.denyStatus = fr.DenyStatus
	}
	switch fr.MissingKey {
	case "", "reject":
	case "allow":
		r.missingOK = true
	default:
		return route{}, file.fieldErr(path+".missingKey", "%q: want reject or allow", fr.MissingKey)
	}
	return r, nil
}

// namespaceKeys gives every route of a policy whose routes key by different
// source lists a keyLabel naming its own list. Without it one source's value
// could be another's key: on a policy of an "ip" route and a
// "header:X-Api-Key" route, a client sending "X-Api-Key: 203.0.113.7" would
// fill 203.0.113.7's window. A policy whose routes all key alike keeps plain
// keys ("203.0.113.7"), as the key's contract gives them; a label changes the
// keys of every route of its policy, and so starts their windows afresh, only
// when a route keyed otherwise joins the policy.
func namespaceKeys(routes []route) {
	lists := map[string]map[string]bool{} // policy name → the key labels of its routes
	for _, r := range routes {
		if lists[r.policy.Name] == nil {
			lists[r.policy.Name] = map[string]bool{}
		}
		lists[r.policy.Name][keyLabel(r.key)] = true
	}
	for i := range routes {
		if len(lists[routes[i].policy.Name]) > 1 {
			routes[i].keyLabel = keyLabel(routes[i].key)
		}
	}
}

// keyLabel names a key source list in a form a client key keeps as it is:
// "ip", "host", "path", "header=X-Api-Key", and a list joined with "/"
// ("ip/header=X-Api-Key"). A header name is a token, which holds neither "="
// nor "/", so two lists never share a label; a label outside the key
// alphabet or over 64 bytes is hashed by JoinKey, which keeps it apart too.
func keyLabel(ks []keySource) string {
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = k.kind
		if k.kind == "header" {
			parts[i] = "header=" + k.header
		}
	}
	return strings.Join(parts, "/")
}

func parseKeySource(s string) (keySource, error) {
	switch s {
	case "ip", "host", "path":
		return keySource{kind: s}, nil
	}
	if name, ok := strings.CutPrefix(s, "header:"); ok && name != "" && isToken(name) {
		return keySource{kind: "header", header: http.CanonicalHeaderKey(name)}, nil
	}
	return keySource{}, fmt.Errorf("%q: want ip, host, path or header:<Name>, joined with +", s)
}

// isToken reports whether s is an RFC 9110 token, as methods and header names are.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return s != ""
}
