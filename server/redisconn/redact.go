package redisconn

import (
	"errors"
	"net/url"
	"slices"
	"strings"
)

// urlSecrets lists what a Redis URL holds that must never be printed: the
// password of its user information and the values of its parameters that
// name a password (a Sentinel URL's password= for the master, say), each as
// written and in the spellings a parser's error may quote it in. It reads
// the URL by hand, so a URL that url.Parse refuses is covered too.
func urlSecrets(raw string) []string {
	var found []string
	rest := raw
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	authority, query := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		query = rest[i+1:]
		if j := strings.IndexByte(query, '#'); j >= 0 {
			query = query[:j]
		}
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		if _, pass, ok := strings.Cut(authority[:at], ":"); ok {
			found = append(found, pass)
		}
	}
	for _, pair := range strings.Split(query, "&") {
		name, value, _ := strings.Cut(pair, "=")
		name = strings.ToLower(name)
		if strings.Contains(name, "pass") || strings.Contains(name, "auth") {
			found = append(found, value)
		}
	}
	var all []string
	for _, s := range found {
		if s == "" {
			continue
		}
		all = append(all, s)
		if u, err := url.PathUnescape(s); err == nil {
			s = u
		}
		all = append(all, s, url.QueryEscape(s), url.PathEscape(s), strings.TrimPrefix(url.UserPassword("", s).String(), ":"))
	}
	// Longest first, so no secret is half replaced by a shorter spelling.
	slices.SortFunc(all, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(all)
}

// redact is err with every secret in its text replaced by "xxxxx", as
// url.URL.Redacted writes a password.
func redact(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	msg := err.Error()
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}
