package server

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/ratescope/ratescope/limiter/httplimit"
)

// forwardAuthPrefix is where proxies ask "may this request pass?"; under it,
// the rest of the path is the original request's (Envoy ext_authz's
// path_prefix).
const forwardAuthPrefix = "/forward-auth"

// original is the request a proxy asks about, in canonical form (canonical):
// routes match it, and the host and path key sources read it.
type original struct {
	method, host, path string
}

// originalRequest reads the request a proxy asks about: X-Forwarded-Method,
// -Host and -Uri when present (as the nearest proxy wrote them: nearest), else
// this request's own method, Host and, under the prefix, its still-escaped
// path. Both forms go through canonical, so a spelling means the same in
// either. A malformed percent-escape is a field error naming where the path
// came from.
func originalRequest(r *http.Request) (original, *httplimit.FieldError) {
	method, host, uri, field := r.Method, r.Host, "/", "path"
	if v := nearest(r.Header, "X-Forwarded-Method", true); v != "" {
		method = v
	}
	if v := nearest(r.Header, "X-Forwarded-Host", true); v != "" {
		host = v
	}
	if v := nearest(r.Header, "X-Forwarded-Uri", false); v != "" {
		uri, field = v, "X-Forwarded-Uri"
	} else if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), forwardAuthPrefix); ok && rest != "" {
		uri = rest
	}
	o, err := canonical(method, host, uri)
	if err != nil {
		return original{}, &httplimit.FieldError{Field: field, Detail: err.Error()}
	}
	return o, nil
}

// nearest is the value of an X-Forwarded-* header that the proxy nearest to
// ratescope wrote: its last line and, for a header whose values hold no
// comma (a host, a method), the last value of that line. The client address
// is read the same way (httplimit.ClientAddr): a proxy that appends puts its
// own value last, so a value a client sent stays left of it and is never
// believed; the first value is the one a client writes. A URI may hold a
// comma, so only its last line counts.
func nearest(h http.Header, name string, list bool) string {
	lines := h.Values(name)
	if len(lines) == 0 {
		return ""
	}
	v := lines[len(lines)-1]
	if list {
		if i := strings.LastIndexByte(v, ','); i >= 0 {
			v = v[i+1:]
		}
	}
	return strings.TrimSpace(v)
}

// canonical is the one form in which an original request is matched, so
// that no spelling of a path slips past its route:
//   - the method upper-cased;
//   - the host lower-cased, without its port, brackets or trailing dot
//     ("API.example.com.:8443" is "api.example.com");
//   - the path without query or fragment, percent-decoded once (every
//     escape, %2F included; a malformed escape is an error), each segment's
//     ";params" dropped (nginx passes "/login;x" on, and servlet containers
//     route it as "/login"), repeated slashes merged and dot segments
//     resolved as RFC 3986 section 5.2.4 does, a trailing slash kept.
//
// Decoding comes first, so an escaped "/", "." or ";" (%2F, %2e, %3B) means
// what it means once a backend decodes it. A route's host and pathPrefix go
// through the same function when the config is read.
func canonical(method, host, uri string) (original, error) {
	p, err := canonicalPath(uri)
	if err != nil {
		return original{}, err
	}
	return original{
		method: strings.ToUpper(strings.TrimSpace(method)),
		host:   canonicalHost(host),
		path:   p,
	}, nil
}

// errBadEscape is a path with a "%" not followed by two hex digits.
var errBadEscape = errors.New("malformed percent-escape: a % must be followed by two hex digits")

func canonicalPath(uri string) (string, error) {
	uri = strings.TrimSpace(uri)
	if i := strings.IndexAny(uri, "?#"); i >= 0 {
		uri = uri[:i]
	}
	if !strings.HasPrefix(uri, "/") {
		// An absolute-form target (http://host/path) names its path after the
		// authority; anything else is taken as a path missing its slash.
		if u, err := url.Parse(uri); err == nil && u.Scheme != "" && u.Host != "" {
			uri = u.EscapedPath()
		}
		if !strings.HasPrefix(uri, "/") {
			uri = "/" + uri
		}
	}
	decoded, err := url.PathUnescape(uri)
	if err != nil {
		return "", errBadEscape
	}
	segs := strings.Split(decoded[1:], "/")
	out := make([]string, 0, len(segs))
	trailing := false
	for _, s := range segs {
		s, _, _ = strings.Cut(s, ";")
		switch s {
		case "", ".":
			trailing = true
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = true
		default:
			out = append(out, s)
			trailing = false
		}
	}
	p := "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		p += "/"
	}
	return p, nil
}

func canonicalHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	return strings.TrimRight(h, ".")
}
