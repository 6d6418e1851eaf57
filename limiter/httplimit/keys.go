package httplimit

import (
	"errors"
	"net/http"
	"strings"
)

// KeyFunc decides whose window a request counts in. A key outside the
// limiter's rules (1-128 bytes of A-Z a-z 0-9 . _ : @ / + = -) is replaced by
// "sha256:" and the first 32 hex digits of its SHA-256. An error answers 400
// naming the key, or the source a MissingKeyError names.
type KeyFunc func(*http.Request) (string, error)

// MissingKeyError reports a key source the request lacks, e.g. a header.
type MissingKeyError struct {
	Source string // as a route names it: "header:X-Api-Key"
	Detail string
}

func (e *MissingKeyError) Error() string { return e.Source + ": " + e.Detail }

// ByClientAddr keys requests by ClientAddr: the client behind the trusted
// proxies, IPv6 clients by their /64.
func ByClientAddr(trusted TrustedProxies) KeyFunc {
	return func(r *http.Request) (string, error) { return ClientAddr(r, trusted) }
}

// ByHeader keys requests by a header's value (e.g. an API key), through
// KeyValue. A request without it gets 400.
func ByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := strings.TrimSpace(r.Header.Get(name))
		if v == "" {
			return "", &MissingKeyError{Source: "header:" + name, Detail: "the request has no " + name + " header"}
		}
		return KeyValue(v), nil
	}
}

// writeKeyError answers a request whose key could not be made.
func writeKeyError(w http.ResponseWriter, err error) {
	fe := FieldError{Field: "key", Detail: err.Error()}
	if mk, ok := errors.AsType[*MissingKeyError](err); ok {
		fe = FieldError{Field: mk.Source, Detail: mk.Detail}
	}
	p := NewProblem(http.StatusBadRequest, fe.Field+": "+fe.Detail)
	p.Errors = []FieldError{fe}
	WriteProblem(w, http.StatusBadRequest, p)
}
