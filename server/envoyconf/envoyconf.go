// Package envoyconf reads envoyproxy/ratelimit's own configuration files —
// a domain per file and its tree of descriptors, each with an optional
// rate_limit — with that service's semantics and load errors, so a team's
// files work unchanged in front of ratescope.
//
// Every leaf limit becomes a ratescope policy named as envoyproxy/ratelimit
// names its statistics, <domain>.<key>[_<value>]… (e.g.
// messaging.message_type_marketing.to_number), decided by the sliding-window
// log unless the file's one extension, a top-level algorithm:, says
// otherwise. Lookup finds the limit a request's descriptor gets, exactly as
// envoyproxy/ratelimit's does: a value match before a key-only one, wildcard
// values (each * matches any run of characters), the request as deep as the
// tree.
package envoyconf

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// Unit is a rate_limit's unit: SECOND to YEAR.
type Unit = rlsv3.RateLimitResponse_RateLimit_Unit

// UnitLength is a unit's length as envoyproxy/ratelimit counts it (a month
// is 30 days, a year 365), or false for UNKNOWN and values out of range.
func UnitLength(u Unit) (time.Duration, bool) {
	const day = 24 * time.Hour
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second, true
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute, true
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour, true
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return day, true
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * day, true
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * day, true
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * day, true
	}
	return 0, false
}

// Limit is one rate_limit of a file.
type Limit struct {
	// Policy decides it: named <domain>.<key>[_<value>]…, one rule of
	// RequestsPerUnit per Unit, Shadow from the descriptor's shadow_mode.
	// An Unlimited limit's policy has no rules and is never decided.
	Policy          limiter.Policy
	Unit            Unit
	RequestsPerUnit uint32
	// Name is the rate_limit's name: what replaces: entries name, and what
	// envoyproxy/ratelimit reports as current_limit.name.
	Name string
	// Replaces names the limits this one drops from a request that matches
	// both.
	Replaces  []string
	Unlimited bool
	// Quota is the descriptor's quota_mode: its OVER_LIMIT makes the
	// request's overall answer OVER_LIMIT only when every quota descriptor of
	// the request is over its limit.
	Quota          bool
	DetailedMetric bool
	// File is the file the limit was read from.
	File string
}

// Set is one loaded directory: every domain, and every limit as a policy.
// It never changes once built.
type Set struct {
	domains  map[string]*node
	limits   []*Limit
	files    []string
	warnings []string
	digest   string // what the files say, whatever their comments and layout
}

// node is one descriptor of the tree; a domain is its root.
type node struct {
	children  map[string]*node // by composite key: key, or key_value
	wildcards []wildcard       // the children whose composite key holds a *
	limit     *Limit
	// pattern is the composite key, kept when share_threshold puts every
	// value it matches in one window.
	pattern       string
	valueToMetric bool
	// base is, at a domain's root, how its limits are decided: the
	// algorithm and counting its policies have.
	base limiter.Policy
}

// wildcard is a child whose composite key holds *, split on it once.
type wildcard struct {
	key   string
	parts []string
}

// Has reports whether domain is one of the files' domains: its descriptors
// are looked up here and nowhere else.
func (s *Set) Has(domain string) bool {
	_, ok := s.domains[domain]
	return ok
}

// Domains lists the files' domains.
func (s *Set) Domains() []string {
	out := make([]string, 0, len(s.domains))
	for d := range s.domains {
		out = append(out, d)
	}
	return out
}

// Policies lists every limited leaf's policy, file by file in name order,
// each file in document order. Unlimited leaves are not policies.
func (s *Set) Policies() []limiter.Policy {
	var out []limiter.Policy
	for _, l := range s.limits {
		if !l.Unlimited {
			out = append(out, l.Policy)
		}
	}
	return out
}

// Limits lists every limit of the set, unlimited ones included, in the
// order of Policies.
func (s *Set) Limits() []*Limit { return s.limits }

// Digest identifies what the files say: equal for files that differ only
// in comments, layout or names.
func (s *Set) Digest() string { return s.digest }

// Files lists the files the set was read from, in name order.
func (s *Set) Files() []string { return s.files }

// Warnings are what loading decided that its files did not say (a limit the
// log cannot hold decided by fixed): worth a log line at every load.
func (s *Set) Warnings() []string { return s.warnings }

// Override is the policy a descriptor's limit override (requests per unit)
// is decided by: base, as the domain's (or the mapping's) limits are
// decided, with its rules replaced by that one, never a shadow. A limit the
// log cannot hold is decided by fixed windows, as a file's would be. It is
// false for a unit of no length.
//
// Its name comes from the configuration, never from the request: it is the
// name of of, the policy the descriptor is decided by without the override
// (a limit of the files, a mapping's policy, or — where no limit matches —
// a policy named for the domain alone). An override whose window is of's
// one window counts on that window, as envoyproxy/ratelimit counts an
// override of the limit's unit on the limit's counter. Any other window is
// kept apart, named of's name and the window in seconds (edge.user/60),
// because one log or fixed counter cannot hold two windows: a shorter one
// would evict and expire what the longer one still counts. So an override
// adds at most one name per unit to each configured one, whatever the
// requests carry.
func Override(base, of limiter.Policy, requestsPerUnit uint32, unit Unit) (limiter.Policy, bool) {
	w, ok := UnitLength(unit)
	if !ok {
		return limiter.Policy{}, false
	}
	p := base
	p.Name, p.Shadow = of.Name, false
	if len(of.Rules) != 1 || of.Rules[0].Window != w {
		p.Name += "/" + strconv.FormatInt(int64(w/time.Second), 10)
	}
	p.Rules = []limiter.Rule{{Limit: int(requestsPerUnit), Window: w}}
	if cannotHold(p) {
		p.Algorithm = envoyAlgorithm
	}
	return p, true
}

// Base is how domain's limits are decided — a policy with no name or rules:
// what an override in domain starts from.
func (s *Set) Base(domain string) limiter.Policy {
	if n := s.domains[domain]; n != nil {
		return n.base
	}
	return limiter.Policy{}
}

// Entry is one key and value of a request's descriptor.
type Entry struct{ Key, Value string }

// Match is what one descriptor found.
type Match struct {
	// Limit applies to the descriptor; nil when none does (the request is
	// answered OK and nothing is counted).
	Limit *Limit
	// Shared is nil unless share_threshold put an entry's value in one window
	// with every value its wildcard matches; then Shared[i] is the pattern
	// entry i is counted by (e.g. "files/*"), "" for an entry counted by its
	// own value.
	Shared []string
	// StatKey is what envoyproxy/ratelimit names the descriptor's
	// statistics: the policy's name, or with detailed_metric and
	// value_to_metric the request's values in it (each as statValue keeps
	// it). Those are as many as the values clients send: whoever makes
	// metrics of them must bound how many it keeps.
	StatKey string
}

// Lookup finds the limit of one descriptor of domain as envoyproxy/ratelimit
// does. At each level of the tree it tries the entry's key and value, then
// the wildcard values in file order, then the key alone; the limit of the
// node reached by the last entry applies. A request deeper or shallower than
// the tree, or leaving it, gets none.
func (s *Set) Lookup(domain string, entries []Entry) Match {
	cur := s.domains[domain]
	if cur == nil || len(entries) == 0 {
		return Match{}
	}
	var m Match
	var stat strings.Builder
	stat.WriteString(domain)
	for i, e := range entries {
		composite := e.Key + "_" + e.Value
		next, wild := cur.children[composite], ""
		if next == nil {
			for _, w := range cur.wildcards {
				if wildcardMatch(w.parts, composite) {
					next, wild = cur.children[w.key], w.key
					break
				}
			}
		}
		byValue := next != nil
		if next == nil {
			next = cur.children[e.Key]
		}
		if next == nil {
			break
		}
		shared := ""
		if wild != "" && next.pattern != "" {
			shared = strings.TrimPrefix(next.pattern, e.Key+"_")
			if m.Shared == nil {
				m.Shared = make([]string, len(entries))
			}
			m.Shared[i] = shared
		}
		stat.WriteByte('.')
		stat.WriteString(e.Key)
		switch v := metricValue(e, next, wild, shared, byValue); {
		case v != "":
			stat.WriteByte('_')
			stat.WriteString(v)
		}
		if next.limit != nil && i == len(entries)-1 {
			m.Limit = next.limit
		}
		if len(next.children) == 0 {
			break
		}
		cur = next
	}
	if m.Limit == nil {
		return Match{}
	}
	m.StatKey = m.Limit.Policy.Name
	switch {
	case m.Limit.DetailedMetric:
		m.StatKey = detailedKey(domain, entries, m.Shared)
	case stat.String() != m.StatKey && len(entries) > 0:
		m.StatKey = stat.String()
	}
	return m
}

// metricValue is the value an entry puts in a value_to_metric statistics
// key: the request's value where the file asks for it (statValue), the
// wildcard or the file's value where it matched one.
func metricValue(e Entry, n *node, wild, shared string, byValue bool) string {
	switch {
	case wild != "" && shared != "":
		return shared
	case wild != "" && n.valueToMetric:
		return statValue(e.Value)
	case wild != "":
		return strings.TrimPrefix(wild, e.Key+"_")
	case byValue:
		return e.Value // equal to the file's
	case n.valueToMetric:
		return statValue(e.Value)
	}
	return ""
}

// statValue is a request's value as a statistics key holds it: as the value
// is in a client key — kept when it is 1-64 bytes of [A-Za-z0-9._@/=+-],
// else "sha256:" and 32 hex digits (httplimit.JoinKey) — so a value of
// megabytes never becomes a metric label.
func statValue(v string) string {
	if v == "" {
		return ""
	}
	return httplimit.JoinKey(httplimit.JoinColon, v)
}

// detailedKey is a detailed_metric limit's statistics key: every entry's key
// and value (statValue), a shared entry's pattern in place of its value.
func detailedKey(domain string, entries []Entry, shared []string) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		switch {
		case shared != nil && shared[i] != "":
			b.WriteByte('_')
			b.WriteString(shared[i])
		case shared == nil || e.Value != "":
			b.WriteByte('_')
			b.WriteString(statValue(e.Value))
		}
	}
	return b.String()
}

// wildcardMatch reports whether value fits a pattern split on its *s: it
// starts with the first part, ends with the last and holds the others in
// order between them.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// String describes the limit as a log line would.
func (l *Limit) String() string {
	if l.Unlimited {
		return l.Policy.Name + " (unlimited)"
	}
	return fmt.Sprintf("%s (%d per %s)", l.Policy.Name, l.RequestsPerUnit, strings.ToLower(l.Unit.String()))
}
