package envoyconf

import (
	"errors"
	"fmt"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
)

// File is one configuration file: its name, as load errors name it, and
// its content.
type File struct {
	Name string
	Data []byte
}

// Options are how a set's policies are decided.
type Options struct {
	// Compat decides the limits of a file that names no algorithm as
	// envoyproxy/ratelimit counts them: a fixed window that counts every
	// hit, allowed or not.
	Compat bool
}

// Parse loads files, in the order given, into one set. Any problem refuses
// the whole set: the error lists each, naming its file, field and line.
func Parse(files []File, opts Options) (*Set, error) {
	s := &Set{domains: map[string]*node{}}
	b := builder{set: s, opts: opts, domainFile: map[string]string{}, nameFile: map[string]string{}}
	var errs []error
	for _, f := range files {
		p := &parser{file: f.Name}
		if yf := p.parse(f.Data); yf != nil {
			b.file(p, yf)
		}
		errs = append(errs, p.errs...)
		s.files = append(s.files, f.Name)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

type builder struct {
	set  *Set
	opts Options
	// domainFile and nameFile say which file defined a domain and a policy
	// name first.
	domainFile, nameFile map[string]string
}

// file adds one parsed file's domain.
func (b *builder) file(p *parser, f *yamlFile) {
	alg, explicit := limiter.Algorithm(f.algorithm), f.algorithm != ""
	_, known := limiter.Describe(alg)
	switch {
	case explicit && !known:
		p.fail(algorithmKey, f.algorithmLine, "%q is not an algorithm; want one of %s", alg, limiter.AlgorithmNames())
		return
	case !explicit && b.opts.Compat:
		alg = limiter.Fixed
	case !explicit:
		alg = limiter.Log
	}
	switch other, dup := b.domainFile[f.domain]; {
	case f.domain == "":
		p.fail("domain", f.domainLine, "the file cannot have an empty domain")
		return
	case dup:
		p.fail("domain", f.domainLine, "duplicate domain %q: %s has it too", f.domain, other)
		return
	}
	b.domainFile[f.domain] = p.file
	fmt.Fprintf(&b.set.canon, "domain %q\n", f.domain)
	root := &node{children: map[string]*node{}, base: limiter.Policy{Algorithm: alg, CountDenied: b.opts.Compat && alg == limiter.Fixed}}
	b.descriptors(p, root, f.domain+".", f.descriptors, leafRules{alg: alg, explicit: explicit, countDenied: root.base.CountDenied})
	b.set.domains[f.domain] = root
}

// leafRules are how a file's limits become policies.
type leafRules struct {
	alg         limiter.Algorithm
	explicit    bool // the file names its algorithm
	countDenied bool // every hit counts, as envoyproxy/ratelimit counts (Options.Compat)
}

// descriptors adds a level of the tree under parent, whose limits' names
// start with prefix (the domain and the levels above, each ending in ".").
func (b *builder) descriptors(p *parser, parent *node, prefix string, ds []yamlDescriptor, rules leafRules) {
	for _, d := range ds {
		if d.key == "" {
			p.fail(d.path+".key", d.line, "descriptor has empty key")
			continue
		}
		composite := d.key
		if d.value != "" {
			composite += "_" + d.value
		}
		full := prefix + composite
		if _, dup := parent.children[composite]; dup {
			p.fail(d.path, d.line, "duplicate descriptor composite key %q", full)
			continue
		}
		n := &node{children: map[string]*node{}, valueToMetric: d.valueToMetric}
		if d.limit != nil {
			n.limit = b.limit(p, d, full, rules)
		}
		wild := strings.Contains(composite, "*")
		if d.shareThreshold {
			if !wild {
				p.fail(d.path+".share_threshold", d.line, "share_threshold can only be used with wildcard values (containing '*'), but found key %q", composite)
			}
			n.pattern = composite
		}
		if wild {
			parent.wildcards = append(parent.wildcards, wildcard{key: composite, parts: strings.Split(composite, "*")})
		}
		fmt.Fprintf(&b.set.canon, "%q share=%v v2m=%v", full, d.shareThreshold, d.valueToMetric)
		if l := n.limit; l != nil {
			fmt.Fprintf(&b.set.canon, " %s name=%q replaces=%q unlimited=%v quota=%v detailed=%v", l.Policy, l.Name, l.Replaces, l.Unlimited, l.Quota, l.DetailedMetric)
		}
		b.set.canon.WriteByte('\n')
		b.descriptors(p, n, full+".", d.children, rules)
		parent.children[composite] = n
	}
}

// limit checks one rate_limit and makes it a policy named full.
func (b *builder) limit(p *parser, d yamlDescriptor, full string, rules leafRules) *Limit {
	y := d.limit
	v, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(y.unit)]
	unit := Unit(v)
	valid := known && unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	switch {
	case y.unlimited && valid:
		p.fail(y.path+".unit", y.unitLine, "should not specify rate limit unit when unlimited")
		return nil
	case !y.unlimited && !valid:
		p.fail(y.path+".unit", y.unitLine, "invalid rate limit unit %q; want second, minute, hour, day, week, month or year", y.unit)
		return nil
	}
	l := &Limit{
		Policy:          limiter.Policy{Name: full, Algorithm: rules.alg, Shadow: d.shadow, CountDenied: rules.countDenied},
		RequestsPerUnit: y.requestsPerUnit,
		Name:            y.name,
		Unlimited:       y.unlimited,
		Quota:           d.quota,
		DetailedMetric:  d.detailedMetric,
		File:            p.file,
	}
	for _, r := range y.replaces {
		switch r.name {
		case "":
			p.fail(r.path, r.line, "should not have an empty replaces entry")
		case y.name:
			p.fail(r.path, r.line, "replaces should not contain name of same descriptor")
		}
		l.Replaces = append(l.Replaces, r.name)
	}
	if other, dup := b.nameFile[full]; dup {
		p.fail(d.path, d.line, "the limit's name %q is also a limit's name in %s; rename a domain or key so the two do not share statistics", full, other)
	}
	b.nameFile[full] = p.file
	b.set.limits = append(b.set.limits, l)
	if l.Unlimited {
		return l
	}
	l.Unit = unit
	w, _ := UnitLength(unit)
	l.Policy.Rules = []limiter.Rule{{Limit: int(y.requestsPerUnit), Window: w}}
	b.bound(p, l, y, rules)
	return l
}

// bound keeps a limit within what its algorithm decides exactly: the log
// keeps an entry per request, so a limit it cannot hold is decided by fixed
// (as envoyproxy/ratelimit decides every limit) unless the file chose the
// log; the counter, gcra and bucket scripts stay exact up to
// limiter.MaxLimit and limiter.MaxWindow.
func (b *builder) bound(p *parser, l *Limit, y *yamlLimit, rules leafRules) {
	r := l.Policy.Rules[0]
	switch l.Policy.Algorithm {
	case limiter.Log:
		if r.Limit <= limiter.MaxLogLimit {
			return
		}
		if rules.explicit {
			p.fail(y.path+".requests_per_unit", y.line, "%d is more than the log keeps (%d); choose another algorithm:", r.Limit, limiter.MaxLogLimit)
			return
		}
		l.Policy.Algorithm, l.Policy.CountDenied = limiter.Fixed, b.opts.Compat
		b.set.warnings = append(b.set.warnings, fmt.Sprintf("%s: %s.requests_per_unit: %d is more than the log keeps (%d); %s is decided by fixed windows",
			p.file, y.path, r.Limit, limiter.MaxLogLimit, l.Policy.Name))
	case limiter.Counter, limiter.GCRA, limiter.Bucket:
		if r.Limit > limiter.MaxLimit {
			p.fail(y.path+".requests_per_unit", y.line, "%d is more than %s takes (%d)", r.Limit, l.Policy.Algorithm, limiter.MaxLimit)
		}
		if r.Window > limiter.MaxWindow {
			p.fail(y.path+".unit", y.unitLine, "%s is longer than %s takes (a week)", strings.ToLower(l.Unit.String()), l.Policy.Algorithm)
		}
	}
}
