package rls

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
	"github.com/ratescope/ratescope/server/envoyconf"
)

// fileLimit is what an answer says of a limit read from envoyproxy/ratelimit's
// files, or of a descriptor's limit override: its own unit and requests per
// unit, its name (the file's, or none), and whether it is a quota.
type fileLimit struct {
	rate  *rlsv3.RateLimitResponse_RateLimit
	quota bool
}

// translateFiles turns a request for a domain of envoyproxy/ratelimit's
// files into one check per descriptor, in the request's order, as
// envoyproxy/ratelimit would decide it:
//   - an operator's override of the limit's policy for the client key
//     (resolve) replaces its rules, and wins over a descriptor's limit
//     override, as in translate; the answer then describes the override's
//     binding rule rather than the file's unit;
//   - else a descriptor's limit override applies whatever the files say, with
//     the override's one rule, never a shadow, named for the limit it
//     matches or, where none does, for the domain (envoyconf.Override):
//     never for the request's keys or values;
//   - else the limit set.Lookup finds applies: none, an unlimited one (OK,
//     nothing counted), or a policy of the files;
//   - a limit whose name another applying limit replaces: is dropped;
//   - the client key is the domain and the entries, <domain>:<key>=<value>…
//     (fileKey), an entry share_threshold shares counted by its pattern;
//   - the cost is read as hitsOf reads it; a peek costs 1 (what may pass
//     now?) or, in compat, 0 (is the window within its limit?), as
//     envoyproxy/ratelimit adds 0 hits;
//   - a descriptor with a value over MaxValueLen is never: OVER_LIMIT where
//     a limit applies.
//
// A descriptor with no entries, or an entry without a key, matches nothing,
// as in envoyproxy/ratelimit; only no descriptors at all, a request beyond
// the bounds (checkBounds) and an override of no unit are malformed.
func translateFiles(req *rlsv3.RateLimitRequest, set *envoyconf.Set, lookup func(string) (*httplimit.Policy, bool),
	resolve resolver, prepare func(limiter.Policy) *httplimit.Policy, compat bool, buf []check) ([]check, error) {
	domain, ds := req.GetDomain(), req.GetDescriptors()
	switch {
	case len(ds) == 0:
		return nil, errors.New("descriptors: give at least one")
	}
	if err := checkBounds(req); err != nil {
		return nil, err
	}
	out := sized(buf, len(ds))
	names := make([]string, len(ds)) // of the limits that may be replaced
	replaced := map[string]bool{}
	for i, d := range ds {
		entries := make([]envoyconf.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = envoyconf.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		m := set.Lookup(domain, entries)
		var c check
		overridden := false
		if l := m.Limit; l != nil && !l.Unlimited && d.GetLimit() != nil {
			if p, ok := lookup(l.Policy.Name); ok {
				overridden = resolve.of(fileKey(domain, entries, m.Shared), p) != p
			}
		}
		switch o := d.GetLimit(); {
		case o != nil && !overridden:
			of := limiter.Policy{Name: domain}
			if m.Limit != nil {
				of = m.Limit.Policy
			}
			unit := envoyconf.Unit(o.GetUnit())
			p, ok := envoyconf.Override(set.Base(domain), of, o.GetRequestsPerUnit(), unit)
			if !ok {
				return nil, fmt.Errorf("descriptors[%d].limit.unit: %s is not a unit; want SECOND to YEAR", i, o.GetUnit())
			}
			c.policy, c.key = prepare(p), fileKey(domain, entries, nil)
			c.file = &fileLimit{rate: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit}}
		case m.Limit == nil:
		case m.Limit.Unlimited:
			c.unlimited = true
		default:
			l := m.Limit
			p, ok := lookup(l.Policy.Name)
			if !ok {
				c.orphan = l.Policy.Name
				break
			}
			c.key, names[i] = fileKey(domain, entries, m.Shared), l.Name
			c.policy = resolve.of(c.key, p)
			c.stat = Stat{Limit: l.Policy.Name, Key: m.StatKey}
			c.file = &fileLimit{rate: &rlsv3.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}, quota: l.Quota}
		}
		if m.Limit != nil && (d.GetLimit() == nil || overridden) {
			for _, r := range m.Limit.Replaces {
				replaced[r] = true
			}
		}
		if c.policy != nil {
			c.setCost(req, d, compat)
			c.never = c.never || overlong(d)
		}
		out[i] = c
	}
	for i, n := range names {
		if n != "" && replaced[n] {
			out[i] = check{}
		}
	}
	return out, nil
}

// hitsOf reads a descriptor's hits: its own hits_addend when set, where 0
// is a peek (count nothing), else the request's, where 0 means 1.
func hitsOf(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) (hits uint64, peek bool) {
	if h := d.GetHitsAddend(); h != nil {
		return h.GetValue(), h.GetValue() == 0
	}
	return max(uint64(req.GetHitsAddend()), 1), false
}

// setCost sets a mapped check's cost from d's hits (hitsOf). A peek costs
// 1 — what may pass now? — or, in compat, 0, as envoyproxy/ratelimit adds no
// hits. A cost the policy can never take is never: OVER_LIMIT without
// asking Redis.
func (c *check) setCost(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor, compat bool) {
	hits, peek := hitsOf(req, d)
	c.peek = peek
	switch {
	case peek && compat:
		c.cost = 0
		return
	case peek:
		c.cost = 1
	default:
		c.cost = int(min(hits, math.MaxInt32))
	}
	c.never = !c.policy.CostFits(c.cost)
}

// fileKey is the client key of a descriptor of the files: the domain and its
// entries, each key=value, joined as clientKey joins parts — a part outside
// the key alphabet is hashed — so no two domains or descriptor paths share
// a window. An entry that share_threshold shares is counted by its pattern.
// A key holding "=" could be read two ways in key=value: such a part is
// made to be hashed, length-prefixed.
func fileKey(domain string, entries []envoyconf.Entry, shared []string) string {
	parts := make([]string, 1, len(entries)+1)
	parts[0] = domain
	for i, e := range entries {
		v := e.Value
		if shared != nil && shared[i] != "" {
			v = shared[i]
		}
		if strings.Contains(e.Key, "=") {
			parts = append(parts, strconv.Itoa(len(e.Key))+"\x00"+e.Key+v)
			continue
		}
		parts = append(parts, e.Key+"="+v)
	}
	return clientKey(parts)
}
