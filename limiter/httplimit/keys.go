package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"github.com/ratescope/ratescope/limiter"
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
// proxies, IPv6 clients by their /64. The key is JoinKey's of that one value,
// as forward auth's "ip", so a client has one window on every entry point.
func ByClientAddr(trusted TrustedProxies) KeyFunc {
	return func(r *http.Request) (string, error) {
		a, err := ClientAddr(r, trusted)
		if err != nil {
			return "", err
		}
		return JoinKey(JoinPlus, a), nil
	}
}

// ByHeader keys requests by a header's value (e.g. an API key), through
// JoinKey as forward auth's "header:<Name>". A request without it gets 400.
func ByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := strings.TrimSpace(r.Header.Get(name))
		if v == "" {
			return "", &MissingKeyError{Source: "header:" + name, Detail: "the request has no " + name + " header"}
		}
		return JoinKey(JoinPlus, v), nil
	}
}

// The joiners of JoinKey: forward auth joins its key sources with +
// ("ip+header:X-Api-Key"), the Envoy service a descriptor's values with :.
const (
	JoinPlus  byte = '+'
	JoinColon byte = ':'
)

// maxKeyValue is the longest value JoinKey keeps as it is.
const maxKeyValue = 64

// JoinKey makes one client key of several values taken from a request (an
// address, a header, a host, a path, a descriptor's values), joined with
// joiner (JoinPlus or JoinColon), so that two different lists of values
// never share a window:
//
//   - a value is kept as it is when it is 1-64 bytes of the key alphabet
//     less ":" and less the joiner — [A-Za-z0-9._@/=-] for JoinPlus,
//     [A-Za-z0-9._@/=+-] for JoinColon;
//   - any other value (empty, too long, or holding a joiner, a space, a
//     brace…) becomes "sha256:" and the first 32 hex digits of its SHA-256.
//
// With JoinPlus ("alice+x","y") is "sha256:…+y" and ("alice","x+y") is
// "alice+sha256:…": two windows. A kept value never holds ":" and a hashed
// one always does, so the key reads back into its values' list (or their
// hashes) whatever their number. With JoinColon the same holds for lists of
// one length, which is what one descriptor mapping gives.
//
// A key that would exceed 128 bytes has its longest kept values hashed, one
// by one, until it fits (each stands for its value as before, so the key
// stays injective); one of more values than fit even hashed is hashed whole.
func JoinKey(joiner byte, values ...string) string {
	parts := make([]string, len(values))
	n := len(values) - 1 // the joiners
	for i, v := range values {
		if !keepable(v, joiner) {
			v = hashed(v)
		}
		parts[i] = v
		n += len(v)
	}
	// The longest kept values go first, in the list's order among equals.
	// A kept value longer than a hash is 40-64 bytes, so one pass per length
	// finds them in that order: linear in the values, where searching for
	// the longest before each hash was quadratic (a 64,000-value key took
	// seconds).
	for l := maxKeyValue; l > hashedLen && n > limiter.MaxKeyLen; l-- {
		for i, p := range parts {
			if len(p) != l {
				continue
			}
			n -= l - hashedLen
			parts[i] = hashed(values[i])
			if n <= limiter.MaxKeyLen {
				break
			}
		}
	}
	k := strings.Join(parts, string(joiner))
	if n > limiter.MaxKeyLen {
		return hashed(k)
	}
	return k
}

// keepable reports whether v may stand in a joined key as it is.
func keepable(v string, joiner byte) bool {
	if len(v) == 0 || len(v) > maxKeyValue {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c != joiner && strings.IndexByte("._@/+=-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// hashedLen is the length of a hashed value: "sha256:" and 32 hex digits.
const hashedLen = len("sha256:") + 32

func hashed(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// fitKey keeps a whole key, as a KeyFunc made it, within the limiter's rules.
func fitKey(k string) string {
	if limiter.ValidateKey(k) == nil {
		return k
	}
	return hashed(k)
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
