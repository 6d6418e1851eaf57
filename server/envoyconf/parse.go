package envoyconf

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/ratescope/ratescope/server/conffile"
)

// validKeys are the keys envoyproxy/ratelimit takes in its files. It checks
// every key of a file against this one flat set, at any depth, and then
// ignores a known key where it means nothing (unit on a descriptor, say), so
// ratescope does too.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true, "unlimited": true,
	"shadow_mode": true, "quota_mode": true, "name": true, "replaces": true,
	"detailed_metric": true, "value_to_metric": true, "share_threshold": true,
	"metadata": true,
}

// algorithmKey is ratescope's one extension to the format: a top-level
// algorithm: for every limit of the file.
const algorithmKey = "algorithm"

// yamlFile is one file as written: the domain's descriptor tree with where
// each field is, so a load error can name it.
type yamlFile struct {
	domain, algorithm         string
	domainLine, algorithmLine int
	descriptors               []yamlDescriptor
}

type yamlDescriptor struct {
	path           *at
	key, value     string
	limit          *yamlLimit
	children       []yamlDescriptor
	shadow, quota  bool
	detailedMetric bool
	valueToMetric  bool
	shareThreshold bool
	line           int
}

type yamlLimit struct {
	path            *at
	unit            string
	unitLine        int
	requestsPerUnit uint32
	unlimited       bool
	name            string
	replaces        []yamlReplace
	line            int
}

type yamlReplace struct {
	path *at
	name string
	line int
}

// parser reads one file, collecting every problem it finds.
type parser struct {
	file string
	errs conffile.Problems
}

// fail records a problem with the field at path (nil: the file as a
// whole) on line (0: unknown).
func (p *parser) fail(path *at, line int, format string, args ...any) {
	if p.errs.Full() {
		p.errs.Count()
		return
	}
	msg := fmt.Sprintf(format, args...)
	where := p.file
	switch {
	case path != nil && line > 0:
		where += ": " + path.String() + fmt.Sprintf(" (line %d)", line)
	case path != nil:
		where += ": " + path.String()
	case line > 0:
		where += fmt.Sprintf(" (line %d)", line)
	}
	p.errs.Add(fmt.Errorf("%s: %s", where, msg))
}

// failed reports whether the file has a problem.
func (p *parser) failed() bool { return p.errs.Len() > 0 }

// parse reads data as envoyproxy/ratelimit reads a file: YAML whose keys are
// all known and whose lists hold mappings, then the fields it knows, where it
// knows them. A file of nothing, or of comments only, has no domain. A
// file whose aliases would expand it excessively is refused before any is
// followed (conffile.Decode).
func (p *parser) parse(data []byte) *yamlFile {
	doc, err := conffile.Decode(data)
	if err != nil {
		p.fail(nil, 0, "%v", err)
		return nil
	}
	root := resolve(doc)
	if root != nil && root.Kind == yaml.DocumentNode {
		root = nil
		if len(doc.Content) > 0 {
			root = resolve(doc.Content[0])
		}
	}
	f := &yamlFile{}
	if root == nil || isNull(root) {
		return f
	}
	if root.Kind != yaml.MappingNode {
		p.fail(nil, root.Line, "the file must be a mapping with domain and descriptors, not %s", kindName(root))
		return nil
	}
	p.checkKeys(root, nil, true)
	if p.failed() {
		return nil
	}
	for _, m := range pairs(root) {
		switch m.name {
		case "domain":
			f.domain, f.domainLine = p.str(m.value, field("domain")), m.key.Line
		case "descriptors":
			f.descriptors = p.descriptors(m.value, field("descriptors"))
		case algorithmKey:
			f.algorithm, f.algorithmLine = p.str(m.value, field(algorithmKey)), m.key.Line
		}
	}
	return f
}

// checkKeys checks what envoyproxy/ratelimit checks before it reads a
// file: every key is a known string, every list holds mappings and no value
// is a fraction; metadata is left to hold anything.
func (p *parser) checkKeys(n *yaml.Node, path *at, top bool) {
	for _, m := range pairs(n) {
		at := path.member(m.name)
		switch {
		case m.key.Tag != "!!str":
			p.fail(path, m.key.Line, "key %s is not a string", m.key.Value)
			continue
		case !validKeys[m.name] && !(top && m.name == algorithmKey):
			p.fail(at, m.key.Line, "unknown key %q", m.name)
			continue
		}
		if m.name == "metadata" {
			continue
		}
		switch v := m.value; v.Kind {
		case yaml.SequenceNode:
			for i, item := range v.Content {
				item = resolve(item)
				ip := at.elem(i)
				if item.Kind != yaml.MappingNode {
					p.fail(ip, item.Line, "a list here holds mappings, not %s", kindName(item))
					continue
				}
				p.checkKeys(item, ip, false)
			}
		case yaml.MappingNode:
			p.checkKeys(v, at, false)
		case yaml.ScalarNode:
			if v.Tag == "!!float" {
				p.fail(at, v.Line, "%s is a fraction; want a whole number, a string or true/false", v.Value)
			}
		}
	}
}

func (p *parser) descriptors(n *yaml.Node, path *at) []yamlDescriptor {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.fail(path, n.Line, "want a list of descriptors, not %s", kindName(n))
		return nil
	}
	out := make([]yamlDescriptor, 0, len(n.Content))
	for i, item := range n.Content {
		item = resolve(item)
		d := yamlDescriptor{path: path.elem(i), line: item.Line}
		for _, m := range pairs(item) {
			at := d.path.member(m.name)
			switch m.name {
			case "key":
				d.key = p.str(m.value, at)
			case "value":
				d.value = p.str(m.value, at)
			case "rate_limit":
				d.limit = p.rateLimit(m.value, at)
			case "descriptors":
				d.children = p.descriptors(m.value, at)
			case "shadow_mode":
				d.shadow = p.boolean(m.value, at)
			case "quota_mode":
				d.quota = p.boolean(m.value, at)
			case "detailed_metric":
				d.detailedMetric = p.boolean(m.value, at)
			case "value_to_metric":
				d.valueToMetric = p.boolean(m.value, at)
			case "share_threshold":
				d.shareThreshold = p.boolean(m.value, at)
			case "metadata":
				if !isNull(m.value) && m.value.Kind != yaml.MappingNode {
					p.fail(at, m.value.Line, "want a mapping, not %s", kindName(m.value))
				}
			}
		}
		out = append(out, d)
	}
	return out
}

func (p *parser) rateLimit(n *yaml.Node, path *at) *yamlLimit {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.fail(path, n.Line, "want a mapping with unit and requests_per_unit, not %s", kindName(n))
		return nil
	}
	l := &yamlLimit{path: path, line: n.Line, unitLine: n.Line}
	for _, m := range pairs(n) {
		at := path.member(m.name)
		switch m.name {
		case "unit":
			l.unit, l.unitLine = p.str(m.value, at), m.key.Line
		case "requests_per_unit":
			l.requestsPerUnit = p.uint32(m.value, at)
		case "unlimited":
			l.unlimited = p.boolean(m.value, at)
		case "name":
			l.name = p.str(m.value, at)
		case "replaces":
			l.replaces = p.replaces(m.value, at)
		}
	}
	return l
}

func (p *parser) replaces(n *yaml.Node, path *at) []yamlReplace {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.fail(path, n.Line, "want a list of {name: …}, not %s", kindName(n))
		return nil
	}
	var out []yamlReplace
	for i, item := range n.Content {
		item = resolve(item)
		r := yamlReplace{path: path.elem(i).member("name"), line: item.Line}
		for _, m := range pairs(item) {
			if m.name == "name" {
				r.name = p.str(m.value, r.path)
				r.line = m.key.Line
			}
		}
		out = append(out, r)
	}
	return out
}

// str reads a string as envoyproxy/ratelimit's YAML library does: any
// scalar as written (123 is "123", true is "true"), null as "".
func (p *parser) str(n *yaml.Node, path *at) string {
	if isNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		p.fail(path, n.Line, "want a string, not %s", kindName(n))
		return ""
	}
	return n.Value
}

func (p *parser) boolean(n *yaml.Node, path *at) bool {
	var b bool
	if isNull(n) {
		return false
	}
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.fail(path, n.Line, "want true or false, not %s", describe(n))
	}
	return b
}

func (p *parser) uint32(n *yaml.Node, path *at) uint32 {
	var u uint32
	if isNull(n) {
		return 0
	}
	if n.Kind != yaml.ScalarNode || n.Decode(&u) != nil {
		p.fail(path, n.Line, "want a whole number from 0 to 4294967295, not %s", describe(n))
	}
	return u
}

// member is one key and its value in a mapping.
type member struct {
	key, value *yaml.Node
	name       string
}

// pairs lists a mapping's members with aliases followed and YAML merge keys
// (<<: *anchor) expanded, as envoyproxy/ratelimit's YAML library reads them:
// a key written in the mapping wins over a merged one, and of a key written
// twice the last one counts. Names are found through a map, so a mapping of
// a million keys costs a million steps.
func pairs(n *yaml.Node) []member {
	var own, merged []member
	index := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Tag == "!!merge" {
			srcs := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				srcs = v.Content
			}
			for _, s := range srcs {
				if s = resolve(s); s.Kind == yaml.MappingNode {
					merged = append(merged, pairs(s)...)
				}
			}
			continue
		}
		m := member{key: k, value: v, name: k.Value}
		if i, ok := index[m.name]; ok {
			own[i] = m
			continue
		}
		index[m.name] = len(own)
		own = append(own, m)
	}
	out := own
	for _, m := range merged {
		if _, ok := index[m.name]; !ok {
			index[m.name] = len(out)
			out = append(out, m)
		}
	}
	return out
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		return fmt.Sprintf("the string %q", n.Value)
	}
	return kindName(n)
}
