package rls

import (
	"errors"
	"fmt"
	"slices"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/envoyconf"
)

// check is one descriptor translated: the limiter call it asks for, or
// nothing when it maps to no policy.
type check struct {
	key    string
	policy *httplimit.Policy // nil: unmapped
	cost   int
	// peek decides without recording (hits_addend 0).
	peek bool
	// never marks a cost the policy can never take: the descriptor is
	// OVER_LIMIT without asking Redis, and nothing is recorded.
	never bool
	// unlimited marks a limit of the files with unlimited: true: OK, with
	// nothing counted.
	unlimited bool
	// file is how the answer describes the limit when a file of
	// envoyproxy/ratelimit's, or a limit override, wrote it; nil: by the
	// policy's binding rule.
	file *fileLimit
	// stat is where the descriptor's hits are counted, for a limit of the
	// files.
	stat Stat
	// orphan names the policy a mapping points at when no such policy is
	// configured: a reload between reading the mappings and the policies.
	// The descriptor is treated as unmapped, as the new config says.
	orphan string
}

func (c check) mapped() bool { return c.policy != nil }

// asks reports whether the check needs the limiter.
func (c check) asks() bool { return c.mapped() && !c.never }

// translate turns a request into one check per descriptor, in the request's
// order, or the first reason it is malformed, naming the field:
//   - domain must be set and descriptors given, each with at least one
//     entry, each entry with a key, all within the bounds (checkBounds);
//   - a descriptor maps when its entries' keys equal a mapping's Keys in
//     order, within the request's domain;
//   - the client key is its entries' values in order, joined with ":" by
//     clientKey;
//   - the cost is read by hitsOf and set by setCost: the descriptor's own
//     hits_addend when set, where 0 is a peek, else the request's, where 0
//     means 1; a cost the policy can never take is never, not an error —
//     Envoy lets a failed call's request through;
//   - an operator's override of the policy for the client key (resolve:
//     the Checker's Resolve) replaces its rules, and wins over the
//     descriptor's own limit: Envoy's limit is one route's setting for every
//     client, the override was set at run time for this one;
//   - else a descriptor's limit override replaces the policy's rules with
//     its one rule (envoyconf.Override), as envoyproxy/ratelimit honours it,
//     under the policy's name (and its window's, when it is not the
//     policy's one window): never a name of the request's;
//   - a descriptor with a value over MaxValueLen is never: OVER_LIMIT;
//   - is_negative_hits is refused: a log records requests and cannot take
//     them back.
func translate(req *rlsv3.RateLimitRequest, maps []Mapping, lookup func(string) (*httplimit.Policy, bool),
	resolve resolver, prepare func(limiter.Policy) *httplimit.Policy, compat bool, buf []check) ([]check, error) {
	domain := req.GetDomain()
	ds := req.GetDescriptors()
	switch {
	case domain == "":
		return nil, errors.New("domain: must not be empty; give the domain of the rate limit filter")
	case len(ds) == 0:
		return nil, errors.New("descriptors: give at least one")
	}
	if err := checkBounds(req); err != nil {
		return nil, err
	}
	out := sized(buf, len(ds))
	keys := make([]string, 0, 4)
	values := make([]string, 0, 4)
	for i, d := range ds {
		entries := d.GetEntries()
		if len(entries) == 0 {
			return nil, fmt.Errorf("descriptors[%d].entries: give at least one", i)
		}
		if d.GetIsNegativeHits() {
			return nil, fmt.Errorf("descriptors[%d].is_negative_hits: not supported: a sliding-window log cannot take requests back", i)
		}
		keys, values = keys[:0], values[:0]
		for j, e := range entries {
			if e.GetKey() == "" {
				return nil, fmt.Errorf("descriptors[%d].entries[%d].key: must not be empty", i, j)
			}
			keys = append(keys, e.GetKey())
			values = append(values, e.GetValue())
		}
		name, ok := policyFor(maps, domain, keys)
		if !ok {
			continue
		}
		p, ok := lookup(name)
		if !ok {
			out[i].orphan = name
			continue
		}
		c := check{key: clientKey(values), policy: p}
		if rp := resolve.of(c.key, p); rp != p {
			c.policy = rp
		} else if o := d.GetLimit(); o != nil {
			unit := envoyconf.Unit(o.GetUnit())
			op, ok := envoyconf.Override(p.Policy, p.Policy, o.GetRequestsPerUnit(), unit)
			if !ok {
				return nil, fmt.Errorf("descriptors[%d].limit.unit: %s is not a unit; want SECOND to YEAR", i, o.GetUnit())
			}
			c.policy = prepare(op)
			c.file = &fileLimit{rate: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit}}
		}
		c.setCost(req, d, compat)
		c.never = c.never || overlong(d)
		out[i] = c
	}
	return out, nil
}

// resolver gives the policy in force for a client key: an operator's
// override of p, or p (httplimit.Checker.PolicyFor); nil: p always.
type resolver func(key string, p *httplimit.Policy) *httplimit.Policy

func (r resolver) of(key string, p *httplimit.Policy) *httplimit.Policy {
	if r == nil {
		return p
	}
	return r(key, p)
}

// policyFor finds the policy of the first mapping in domain whose keys are
// exactly keys.
func policyFor(maps []Mapping, domain string, keys []string) (string, bool) {
	for _, m := range maps {
		if m.Domain == domain && slices.Equal(m.Keys, keys) {
			return m.Policy, true
		}
	}
	return "", false
}

// clientKey joins a descriptor's values with ":" into a key the limiter
// takes, hashing each value outside [A-Za-z0-9._@/=+-] or over 64 bytes
// (httplimit.JoinKey, as forward auth joins its key sources), so
// [tenant=t1, user=u1] and [user="t1:u1"] are two windows.
func clientKey(values []string) string { return httplimit.JoinKey(httplimit.JoinColon, values...) }
