package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// maxBody is the largest request body read; a larger one gets 413.
const maxBody = 64 << 10

// field describes one parameter a handler reads.
type field struct {
	name    string
	integer bool // in a JSON body it must be a JSON integer
}

var (
	fieldKey      = field{name: "key"}
	fieldPolicy   = field{name: "policy"}
	fieldCost     = field{name: "cost", integer: true}
	fieldMode     = field{name: "mode"}
	fieldRequests = field{name: "requests", integer: true}
	fieldThinkMs  = field{name: "thinkMs", integer: true}
	fieldWait     = field{name: "wait"}
)

// params are the parameters of one request, from its query string and JSON
// body, with the problems found so far per field.
type params struct {
	values map[string]string
	errs   []httplimit.FieldError
}

func (p *params) fail(field, format string, args ...any) {
	p.errs = append(p.errs, httplimit.FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
}

func (p *params) failed(field string) bool {
	for _, e := range p.errs {
		if e.Field == field {
			return true
		}
	}
	return false
}

// problem is the 400 for what was found, or nil.
func (p *params) problem() error {
	if len(p.errs) == 0 {
		return nil
	}
	return badRequest(p.errs)
}

// readParams collects fields from the query string and, when there is one, a
// JSON object body. A field given in both must have the same value; a field
// repeated in the query is an error. Only a body over maxBody is an error by
// itself (413); everything else is recorded per field.
func readParams(c echo.Context, fields ...field) (*params, error) {
	p := readQuery(c, fields...)
	body, err := readBody(c.Request())
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return p, nil
	}
	var given [8][]byte // each field's raw value in the body, nil when absent
	err = bodyMembers(body, func(name string, raw []byte) {
		for i, f := range fields {
			if f.name == name && i < len(given) {
				given[i] = raw
			}
		}
	})
	if err != nil {
		p.fail("body", "%v", err)
		return p, nil
	}
	for i, f := range fields {
		if i >= len(given) || given[i] == nil || p.failed(f.name) {
			continue
		}
		raw := given[i]
		v, err := bodyValue(f, raw)
		if err != nil {
			p.fail(f.name, "%v", err)
			continue
		}
		if q, inQuery := p.values[f.name]; inQuery && q != v {
			p.fail(f.name, "the query says %q but the body says %q; give one value", q, v)
			continue
		}
		p.values[f.name] = v
	}
	return p, nil
}

// readQuery collects fields from the query string alone, for a request
// whose body is something else (readParams).
func readQuery(c echo.Context, fields ...field) *params {
	p := &params{values: make(map[string]string, len(fields))}
	counts, err := queryFields(c.Request().URL.RawQuery, fields, p.values)
	if err != nil {
		p.fail("query", "the query string is malformed: %v", err)
	}
	for i, f := range fields {
		if counts[i] > 1 {
			delete(p.values, f.name)
			p.fail(f.name, "given %d times in the query; give it once", counts[i])
		}
	}
	return p
}

// queryFields reads fields from a raw query string into values, as
// url.ParseQuery would read them — the same pairs, unescaping and first error
// — without building a map of every parameter: this runs on every check.
// counts[i] is how often fields[i] was given; values holds its first value.
func queryFields(raw string, fields []field, values map[string]string) (counts [8]int, err error) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if strings.Contains(pair, ";") {
			if err == nil {
				err = errors.New("invalid semicolon separator in query")
			}
			continue
		}
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, err1 := url.QueryUnescape(k)
		if err1 != nil {
			if err == nil {
				err = err1
			}
			continue
		}
		v, err1 = url.QueryUnescape(v)
		if err1 != nil {
			if err == nil {
				err = err1
			}
			continue
		}
		for i, f := range fields {
			if f.name == k && i < len(counts) {
				if counts[i] == 0 {
					values[k] = v
				}
				counts[i]++
			}
		}
	}
	return counts, err
}

func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > maxBody {
		return nil, tooLarge()
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, nil // nothing to read: no buffer for it
	}
	if r.ContentLength > 0 { // the reader ends there: one buffer of that size
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, newProblem(http.StatusBadRequest, "failed to read the request body")
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, newProblem(http.StatusBadRequest, "failed to read the request body")
	}
	if len(b) > maxBody {
		return nil, tooLarge()
	}
	return b, nil
}

func tooLarge() error {
	return newProblem(http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes", maxBody))
}

func decodeObject(body []byte) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, fmt.Errorf("the body must be one JSON object, e.g. {\"key\":\"user:42\"}")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("the body must be one JSON object with nothing after it")
	}
	return obj, nil
}

// bodyValue turns a JSON member into the string form a query would carry.
func bodyValue(f field, raw []byte) (string, error) {
	if f.integer {
		s := string(bytes.TrimSpace(raw))
		if !isInteger(s) {
			return "", fmt.Errorf("must be a JSON integer, not %s", truncate(s, 40))
		}
		return s, nil
	}
	if raw[0] == '"' { // a valid string: bodyMembers checked the body
		return jsonString(raw), nil
	}
	var s string // null reads as "", as an absent value would
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("must be a JSON string")
	}
	return s, nil
}

func isInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// key validates the required client key.
func (p *params) key() string {
	k, ok := p.values["key"]
	switch {
	case p.failed("key"):
	case !ok:
		p.fail("key", "is required")
	case limiter.ValidateKey(k) != nil:
		p.fail("key", "%q is not a valid key: use 1-%d bytes of %s (in a query, send + as %%2B)", truncate(k, 140), limiter.MaxKeyLen, limiter.KeyAlphabet)
	}
	return k
}

// policy finds the named policy in set, "default" when none is named. When
// there is no such policy it records the problem and returns an empty one.
func (p *params) policy(set *settings) *policyEntry {
	name, ok := p.values["policy"]
	if !ok {
		name = defaultPolicy
	}
	pol, found := set.policy(name)
	if !found {
		if !p.failed("policy") {
			p.fail("policy", "unknown policy %q; GET /api/v1/policies lists them", truncate(name, 40))
		}
		return &policyEntry{Policy: &httplimit.Policy{}}
	}
	return pol
}

// duration reads an optional duration such as 300ms, from 0 to hi.
func (p *params) duration(name string, hi time.Duration) time.Duration {
	s, ok := p.values[name]
	if !ok || p.failed(name) {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > hi {
		p.fail(name, "must be a duration from 0 to %s, such as 300ms or 5s, not %q", hi, truncate(s, 40))
		return 0
	}
	return d
}

// integer reads an optional whole number in [lo, hi].
func (p *params) integer(name string, def, lo, hi int) int {
	s, ok := p.values[name]
	if !ok || p.failed(name) {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil && !isInteger(s) {
		p.fail(name, "must be a whole number, not %q", truncate(s, 40))
		return def
	}
	if err != nil || n < lo || n > hi {
		p.fail(name, "must be from %d to %d", lo, hi)
		return def
	}
	return n
}
