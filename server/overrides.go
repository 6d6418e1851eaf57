package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/tenants"
)

// Overrides give one client, or every client whose key starts with a
// prefix, its own rules on a policy at run time (package tenants). These
// routes read and change them; every entry point's checks apply them
// through the Checker's Resolve.

// Bounds of a listing page.
const (
	defaultOverridesPage = 100
	maxOverridesPage     = 1000
)

var (
	fieldPrefix = field{name: "prefix"}
	fieldCursor = field{name: "cursor"}
)

// overridesAPI is what the override routes use: the policies in force, the
// admin token, the overrides and the bound on their Redis calls.
type overridesAPI struct {
	store *configStore
	auth  authorizer
	ten   *tenants.Store
	redis redisCalls
	log   *slog.Logger
}

// overrideJSON is one stored override: of key or of prefix, its rules as
// the policy reads them, its note and when it was last set.
type overrideJSON struct {
	Policy    string           `json:"policy"`
	Key       string           `json:"key,omitempty"`
	Prefix    string           `json:"prefix,omitempty"`
	Rules     []policyRuleJSON `json:"rules"`
	Note      string           `json:"note"`
	UpdatedMs int64            `json:"updatedMs"`
}

// appliedJSON answers which override applies to one key: match says how
// (key, prefix or none), rules are those in force for it — the override's,
// or the policy's own when none applies.
type appliedJSON struct {
	Policy    string           `json:"policy"`
	Key       string           `json:"key"`
	Match     tenants.Match    `json:"match"`
	Prefix    string           `json:"prefix,omitempty"`
	Rules     []policyRuleJSON `json:"rules"`
	Note      *string          `json:"note,omitempty"`
	UpdatedMs *int64           `json:"updatedMs,omitempty"`
}

type overridesJSON struct {
	Overrides  []overrideJSON `json:"overrides"`
	NextCursor string         `json:"nextCursor,omitempty"`
}

// rulesJSON lists rules as /api/v1/policies does: a window's windowMs, a
// calendar quota's period, an inflight rule's mark.
func rulesJSON(rules []limiter.Rule) []policyRuleJSON {
	out := make([]policyRuleJSON, len(rules))
	for i, r := range rules {
		out[i] = policyRuleJSON{Limit: r.Limit, WindowMs: r.WindowMs(), Period: r.Period, InFlight: r.InFlight}
	}
	return out
}

// newOverrideJSON describes o under policy p. Rules the policy's algorithm
// no longer takes (a reload changed it) are listed as none: such an override
// does not apply until it is set again.
func newOverrideJSON(o tenants.Override, p limiter.Policy) overrideJSON {
	rules, _ := tenants.ParseRules(p, o.Rules)
	return overrideJSON{Policy: o.Policy, Key: o.Key, Prefix: o.Prefix, Rules: rulesJSON(rules), Note: o.Note, UpdatedMs: o.UpdatedMs}
}

// overrideRequest is one override call's validated query: the policy, and the key
// or prefix it names (neither: the whole policy).
type overrideRequest struct {
	pol *policyEntry
	who tenants.Subject
	p   *params
}

// read checks the admin token, then reads the policy (required) and key or
// prefix from the query; one is required when need is set, and at most one
// may be given. Problems are left in r.p for the caller to add to.
func (a overridesAPI) read(c echo.Context, need bool, more ...field) (overrideRequest, error) {
	if err := a.auth.authorizeAdmin(c, "overrides"); err != nil {
		return overrideRequest{}, err
	}
	p := readQuery(c, append([]field{fieldPolicy, fieldKey, fieldPrefix}, more...)...)
	r := overrideRequest{p: p, pol: &policyEntry{Policy: &httplimit.Policy{}}}
	if _, ok := p.values["policy"]; ok || p.failed("policy") {
		r.pol = p.policy(a.store.load())
	} else {
		p.fail("policy", "is required: the policy whose overrides these are")
	}
	_, hasKey := p.values["key"]
	prefix, hasPrefix := p.values["prefix"]
	switch {
	case hasKey && hasPrefix:
		p.fail("prefix", "give key or prefix, not both")
	case hasKey:
		r.who.Key = p.key()
	case hasPrefix:
		if err := tenants.ValidatePrefix(prefix); err != nil {
			p.fail("prefix", "%q: %v (in a query, send + as %%2B)", truncate(prefix, 140), err)
		}
		r.who.Prefix = prefix
	case need && !p.failed("key") && !p.failed("prefix"):
		p.fail("key", "give key (one client) or prefix (every key that starts with it)")
	}
	return r, nil
}

// handlePutOverride sets one override: PUT /api/v1/overrides?policy=&key=
// (or &prefix=), body {"rules":["1000/1m"],"note":"…"}.
func handlePutOverride(a overridesAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		r, err := a.read(c, true)
		if err != nil {
			return err
		}
		rules, note, err := readOverrideBody(c, r.p)
		if err != nil {
			return err
		}
		if rules != nil && !r.p.failed("policy") {
			if _, err := tenants.ParseRules(r.pol.Policy.Policy, rules); err != nil {
				var re *tenants.RuleError
				errors.As(err, &re)
				r.p.fail(re.Field(), "%v", re)
			}
		}
		if err := r.p.problem(); err != nil {
			return err
		}
		var o tenants.Override
		full := false
		if err := a.redis.do(c, "override", "failed to store the override in Redis", func(ctx context.Context) (err error) {
			o, err = a.ten.Put(ctx, r.pol.Name, r.who, rules, note)
			if errors.Is(err, tenants.ErrFull) {
				full, err = true, nil
			}
			return err
		}); err != nil {
			return err
		}
		if full {
			return newProblem(http.StatusConflict, "policy "+r.pol.Name+": "+tenants.ErrFull.Error())
		}
		a.log.Info("override set", "policy", o.Policy, "override", o.Label(), "key", o.Key, "rules", strings.Join(o.Rules, ","))
		return c.JSON(http.StatusOK, newOverrideJSON(o, r.pol.Policy.Policy))
	}
}

// readOverrideBody reads a PUT's body: rules, a list of LIMIT/WINDOW
// strings, and an optional note of at most tenants.MaxNote bytes.
func readOverrideBody(c echo.Context, p *params) (rules []string, note string, err error) {
	body, err := readBody(c.Request())
	if err != nil {
		return nil, "", err
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		p.fail("body", `give a JSON object, e.g. {"rules":["1000/1m"],"note":"enterprise plan"}`)
		return nil, "", nil
	}
	obj, err := decodeObject(body)
	if err != nil {
		p.fail("body", "%v", err)
		return nil, "", nil
	}
	if raw, ok := obj["rules"]; !ok {
		p.fail("rules", `is required: a list such as ["1000/1m","20000/24h"]`)
	} else if err := json.Unmarshal(raw, &rules); err != nil || rules == nil {
		p.fail("rules", `must be a list of strings such as ["1000/1m","20000/24h"]`)
		rules = nil
	}
	if raw, ok := obj["note"]; ok && string(raw) != "null" {
		switch err := json.Unmarshal(raw, &note); {
		case err != nil:
			p.fail("note", "must be a JSON string")
		case len(note) > tenants.MaxNote:
			p.fail("note", "must be at most %d bytes, not %d", tenants.MaxNote, len(note))
		}
	}
	return rules, note, nil
}

// handleGetOverrides lists a policy's overrides (GET
// /api/v1/overrides?policy=, paged by limit and cursor), answers which
// applies to one key (&key=), or gives the override of one prefix (&prefix=).
func handleGetOverrides(a overridesAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		r, err := a.read(c, false, fieldLimit, fieldCursor)
		if err != nil {
			return err
		}
		limit := r.p.integer("limit", defaultOverridesPage, 1, maxOverridesPage)
		after := ""
		if cur, ok := r.p.values["cursor"]; ok {
			b, err := base64.RawURLEncoding.DecodeString(cur)
			if err != nil || len(b) == 0 {
				r.p.fail("cursor", "is not a cursor this API gave; send a page's nextCursor as it is")
			}
			after = string(b)
		}
		if err := r.p.problem(); err != nil {
			return err
		}
		pol := r.pol.Policy.Policy
		switch {
		case r.who.Key != "":
			return c.JSON(http.StatusOK, a.applied(pol, r.who.Key))
		case r.who.Prefix != "":
			o, ok := a.ten.Get(pol.Name, r.who)
			if !ok {
				return newProblem(http.StatusNotFound, "policy "+pol.Name+" has no override of prefix "+r.who.Prefix)
			}
			return c.JSON(http.StatusOK, newOverrideJSON(o, pol))
		}
		page, next := a.ten.List(pol.Name, after, limit)
		out := overridesJSON{Overrides: make([]overrideJSON, len(page))}
		for i, o := range page {
			out.Overrides[i] = newOverrideJSON(o, pol)
		}
		if next != "" {
			out.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(next))
		}
		return c.JSON(http.StatusOK, out)
	}
}

// applied answers which override applies to key under pol.
func (a overridesAPI) applied(pol limiter.Policy, key string) appliedJSON {
	o, match := a.ten.Lookup(pol.Name, key)
	out := appliedJSON{Policy: pol.Name, Key: key, Match: match, Rules: rulesJSON(pol.Rules)}
	if match == tenants.MatchNone {
		return out
	}
	j := newOverrideJSON(o, pol)
	out.Prefix, out.Rules, out.Note, out.UpdatedMs = o.Prefix, j.Rules, &o.Note, &o.UpdatedMs
	return out
}

// handleDeleteOverride removes one override: DELETE
// /api/v1/overrides?policy=&key= (or &prefix=); 404 when there is none.
func handleDeleteOverride(a overridesAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		r, err := a.read(c, true)
		if err != nil {
			return err
		}
		if err := r.p.problem(); err != nil {
			return err
		}
		var found bool
		if err := a.redis.do(c, "override", "failed to remove the override in Redis", func(ctx context.Context) (err error) {
			found, err = a.ten.Delete(ctx, r.pol.Name, r.who)
			return err
		}); err != nil {
			return err
		}
		if !found {
			what := "key " + r.who.Key
			if r.who.Prefix != "" {
				what = "prefix " + r.who.Prefix
			}
			return newProblem(http.StatusNotFound, "policy "+r.pol.Name+" has no override of "+what)
		}
		a.log.Info("override removed", "policy", r.pol.Name, "key", r.who.Key, "prefix", r.who.Prefix)
		return c.NoContent(http.StatusNoContent)
	}
}
