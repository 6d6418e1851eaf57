package envoyconf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/server/conffile"
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
//
// Loading costs time and memory linear in the files: aliases are bounded
// before they are followed (conffile.Decode), a limit's name is at most
// MaxNameBytes, and problems beyond the first conffile.MaxListed are
// counted, not listed.
func Parse(files []File, opts Options) (*Set, error) {
	s := &Set{domains: map[string]*node{}}
	b := builder{set: s, opts: opts, domainFile: map[string]string{}, nameFile: map[string]string{}, canon: sha256.New()}
	var errs conffile.Problems
	for _, f := range files {
		p := &parser{file: f.Name}
		if yf := p.parse(f.Data); yf != nil {
			b.file(p, yf)
		}
		errs.Merge(&p.errs)
		s.files = append(s.files, f.Name)
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	if b.moreWarnings > 0 {
		s.warnings = append(s.warnings, fmt.Sprintf("… and %d more limits decided by fixed windows", b.moreWarnings))
	}
	s.digest = hex.EncodeToString(b.canon.Sum(nil)[:8])
	return s, nil
}

// MaxNameBytes bounds a descriptor's name, <domain>.<key>[_<value>]… —
// its limit's policy name — in bytes. Every limit's name spells out the
// descriptors above it, so without a bound one long value above many limits
// (or a tree thousands of levels deep) would cost memory growing with the
// square of the file.
const MaxNameBytes = 512

type builder struct {
	set  *Set
	opts Options
	// domainFile and nameFile say which file defined a domain and a policy
	// name first.
	domainFile, nameFile map[string]string
	// canon hashes what the files say, whatever their comments and layout
	// (Set.Digest): each descriptor by its depth and composite key.
	canon hash.Hash
	// names are the composite keys from the domain down to the descriptor
	// being built; nameLen is the length of the name they make.
	names   []string
	nameLen int
	// moreWarnings counts the warnings past the first conffile.MaxListed.
	moreWarnings int
}

// file adds one parsed file's domain.
func (b *builder) file(p *parser, f *yamlFile) {
	alg, explicit := limiter.Algorithm(f.algorithm), f.algorithm != ""
	_, known := limiter.Describe(alg)
	switch {
	case explicit && !known:
		p.fail(field(algorithmKey), f.algorithmLine, "%q is not an algorithm; want one of %s", alg, limiter.AlgorithmNames())
		return
	case !explicit && b.opts.Compat:
		alg = envoyAlgorithm
	case !explicit:
		alg = limiter.Log
	}
	switch other, dup := b.domainFile[f.domain]; {
	case f.domain == "":
		p.fail(field("domain"), f.domainLine, "the file cannot have an empty domain")
		return
	case dup:
		p.fail(field("domain"), f.domainLine, "duplicate domain %q: %s has it too", f.domain, other)
		return
	}
	if len(f.domain) > MaxNameBytes {
		p.fail(field("domain"), f.domainLine, "the domain is %d bytes long; a name may have at most %d", len(f.domain), MaxNameBytes)
		return
	}
	b.domainFile[f.domain] = p.file
	fmt.Fprintf(b.canon, "domain %q\n", f.domain)
	root := &node{children: map[string]*node{}, base: limiter.Policy{Algorithm: alg, CountDenied: b.opts.Compat && alg == envoyAlgorithm}}
	b.names, b.nameLen = append(b.names[:0], f.domain), len(f.domain)
	b.descriptors(p, root, f.descriptors, leafRules{alg: alg, explicit: explicit, countDenied: root.base.CountDenied})
	b.set.domains[f.domain] = root
}

// name is the name of the descriptor being built: its limit's policy name.
func (b *builder) name() string { return strings.Join(b.names, ".") }

// leafRules are how a file's limits become policies.
type leafRules struct {
	alg         limiter.Algorithm
	explicit    bool // the file names its algorithm
	countDenied bool // every hit counts, as envoyproxy/ratelimit counts (Options.Compat)
}

// descriptors adds a level of the tree under parent, whose name is
// b.names.
func (b *builder) descriptors(p *parser, parent *node, ds []yamlDescriptor, rules leafRules) {
	for _, d := range ds {
		if d.key == "" {
			p.fail(d.path.member("key"), d.line, "descriptor has empty key")
			continue
		}
		composite := d.key
		if d.value != "" {
			composite += "_" + d.value
		}
		if l := b.nameLen + 1 + len(composite); l > MaxNameBytes {
			p.fail(d.path, d.line, "the descriptor's name %.64q… is %d bytes long; a name (domain, keys and values) may have at most %d", b.name()+"."+composite, l, MaxNameBytes)
			continue
		}
		b.names, b.nameLen = append(b.names, composite), b.nameLen+1+len(composite)
		b.descriptor(p, parent, d, composite, rules)
		b.names, b.nameLen = b.names[:len(b.names)-1], b.nameLen-1-len(composite)
	}
}

// descriptor adds d, whose composite key is composite and name b.names,
// under parent.
func (b *builder) descriptor(p *parser, parent *node, d yamlDescriptor, composite string, rules leafRules) {
	if _, dup := parent.children[composite]; dup {
		p.fail(d.path, d.line, "duplicate descriptor composite key %q", b.name())
		return
	}
	n := &node{children: map[string]*node{}, valueToMetric: d.valueToMetric}
	if d.limit != nil {
		n.limit = b.limit(p, d, b.name(), rules)
	}
	wild := strings.Contains(composite, "*")
	if d.shareThreshold {
		if !wild {
			p.fail(d.path.member("share_threshold"), d.line, "share_threshold can only be used with wildcard values (containing '*'), but found key %q", composite)
		}
		n.pattern = composite
	}
	if wild {
		parent.wildcards = append(parent.wildcards, wildcard{key: composite, parts: strings.Split(composite, "*")})
	}
	fmt.Fprintf(b.canon, "%d %q share=%v v2m=%v", len(b.names), composite, d.shareThreshold, d.valueToMetric)
	if l := n.limit; l != nil {
		fmt.Fprintf(b.canon, " %s name=%q replaces=%q unlimited=%v quota=%v detailed=%v", l.Policy, l.Name, l.Replaces, l.Unlimited, l.Quota, l.DetailedMetric)
	}
	b.canon.Write([]byte{'\n'})
	b.descriptors(p, n, d.children, rules)
	parent.children[composite] = n
}

// limit checks one rate_limit and makes it a policy named full.
func (b *builder) limit(p *parser, d yamlDescriptor, full string, rules leafRules) *Limit {
	y := d.limit
	v, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(y.unit)]
	unit := Unit(v)
	valid := known && unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	switch {
	case y.unlimited && valid:
		p.fail(y.path.member("unit"), y.unitLine, "should not specify rate limit unit when unlimited")
		return nil
	case !y.unlimited && !valid:
		p.fail(y.path.member("unit"), y.unitLine, "invalid rate limit unit %q; want second, minute, hour, day, week, month or year", y.unit)
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
