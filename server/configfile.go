package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratescope/ratescope/server/conffile"
)

// fileConfig is the config file's layout. Decoding is strict: a
// field not listed here is an error naming it and its line.
type fileConfig struct {
	Policies       []filePolicy `yaml:"policies"`
	TrustedProxies []string     `yaml:"trustedProxies"`
	Unmatched      string       `yaml:"unmatched"`
	Routes         []fileRoute  `yaml:"routes"`
	Envoy          []fileEnvoy  `yaml:"envoy"`
}

type filePolicy struct {
	Name      string   `yaml:"name"`
	Rules     []string `yaml:"rules"`
	Algorithm string   `yaml:"algorithm"`
	Shadow    bool     `yaml:"shadow"`
	Lock      string   `yaml:"lock"`     // a duration, e.g. 15m: +lock=15m
	Timezone  string   `yaml:"timezone"` // an IANA zone for the quotas, e.g. Europe/Berlin: +tz=Europe/Berlin
	Lease     string   `yaml:"lease"`    // an inflight policy's lease time, e.g. 45s: +lease=45s
}

type fileRoute struct {
	Match struct {
		Host       string   `yaml:"host"`
		Methods    []string `yaml:"methods"`
		PathPrefix string   `yaml:"pathPrefix"`
	} `yaml:"match"`
	IgnoreCase bool   `yaml:"ignoreCase"`
	Policy     string `yaml:"policy"`
	Key        string `yaml:"key"`
	Cost       *int   `yaml:"cost"`
	DenyStatus int    `yaml:"denyStatus"`
	MissingKey string `yaml:"missingKey"`
}

type fileEnvoy struct {
	Domain      string `yaml:"domain"`
	Descriptors []struct {
		Keys   []string `yaml:"keys"`
		Policy string   `yaml:"policy"`
	} `yaml:"descriptors"`
}

// parsedFile is a decoded config file with its node tree, so validation
// errors can name the line of the field they are about.
type parsedFile struct {
	fileConfig
	root *yaml.Node
}

// parseFile decodes a config file strictly. A file of comments only is an
// empty config; a file of no bytes at all is refused, because that is also
// what a file being rewritten in place looks like for a moment. A file
// whose aliases would expand it excessively is refused before any is
// followed (conffile.Decode), as envoyproxy/ratelimit's files are.
func parseFile(b []byte) (*parsedFile, error) {
	if len(b) == 0 {
		return nil, errors.New("the file is empty; write at least one setting or a comment (or start without --config)")
	}
	root, err := conffile.Decode(b)
	if err != nil {
		return nil, err
	}
	out := &parsedFile{root: root}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&out.fileConfig); err != nil {
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		return nil, fmt.Errorf("failed to read the YAML: %s", explainYAML(out.root, err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("failed to read the YAML: it holds more than one document")
	}
	return out, nil
}

var (
	yamlUnknownField = regexp.MustCompile(`^line (\d+): field (\S+) not found in type `)
	yamlWrongType    = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (\\S+)$")
)

// explainYAML rewrites the decoder's messages, which name Go types, to name
// the config file's fields instead: "line 2: field polices not found: …",
// "line 9: routes[0].cost: want a whole number, not `abc`".
func explainYAML(root *yaml.Node, err error) string {
	te, ok := errors.AsType[*yaml.TypeError](err)
	if !ok {
		return strings.TrimPrefix(err.Error(), "yaml: ")
	}
	// Each message is placed by a walk of the file: only the first few are.
	errs := te.Errors
	if len(errs) > conffile.MaxListed {
		errs = errs[:conffile.MaxListed]
	}
	msgs := make([]string, len(errs), len(errs)+1)
	for i, m := range errs {
		msgs[i] = m
		if f := yamlUnknownField.FindStringSubmatch(m); f != nil {
			line, _ := strconv.Atoi(f[1])
			where := "the file's top level"
			if path := fieldAt(root, line, f[2], true); strings.Contains(path, ".") {
				where = path[:strings.LastIndex(path, ".")]
			}
			msgs[i] = fmt.Sprintf("line %s: field %s not found: %s has no such setting", f[1], f[2], where)
		} else if f := yamlWrongType.FindStringSubmatch(m); f != nil {
			line, _ := strconv.Atoi(f[1])
			got := "`" + f[3] + "`"
			if f[3] == "" {
				got = map[string]string{"seq": "a list", "map": "a mapping"}[f[2]]
			}
			path := fieldAt(root, line, f[3], false)
			if path == "" {
				path = "a value"
			}
			msgs[i] = fmt.Sprintf("line %s: %s: want %s, not %s", f[1], path, yamlKind(f[4]), got)
		}
	}
	if more := len(te.Errors) - len(errs); more > 0 {
		msgs = append(msgs, fmt.Sprintf("… and %d more problems", more))
	}
	return strings.Join(msgs, "; ")
}

// yamlKind says what a field of Go type t holds, in the file's terms.
func yamlKind(t string) string {
	switch t = strings.TrimPrefix(t, "*"); {
	case t == "int":
		return "a whole number"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case t == "[]string":
		return "a list of strings"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	return "a mapping"
}

// fieldAt finds the path (routes[0].cost) of the member on line whose key
// (byKey) or scalar value is text; failing that, the first member on line.
func fieldAt(root *yaml.Node, line int, text string, byKey bool) string {
	var exact, first string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		visit := func(at *yaml.Node, v *yaml.Node, p string) {
			if at.Line == line {
				if first == "" {
					first = p
				}
				if exact == "" && ((byKey && at.Value == text) || (!byKey && v.Value == text)) {
					exact = p
				}
			}
			walk(v, p)
		}
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				at := v
				if byKey {
					at = k
				}
				visit(at, v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				visit(c, c, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	if root != nil {
		walk(root, "")
	}
	if exact != "" {
		return exact
	}
	return first
}

// fieldErr names a field by its path (e.g. routes[1].denyStatus) and, when
// the file has it, its line.
func (f *parsedFile) fieldErr(path string, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if line := f.line(path); line > 0 {
		return fmt.Errorf("%s (line %d): %s", path, line, msg)
	}
	return fmt.Errorf("%s: %s", path, msg)
}

// line finds the line of a path such as routes[1].match.host: the key's line
// for a mapping member, the item's for a sequence item; where the path runs
// out (a field left out), the line of the nearest node that exists.
func (f *parsedFile) line(path string) int {
	if f == nil || f.root == nil || len(f.root.Content) == 0 {
		return 0
	}
	n := f.root.Content[0]
	line := 0
	for part := range strings.SplitSeq(path, ".") {
		name, idx, hasIdx := strings.Cut(part, "[")
		next := mappingValue(n, name)
		if next == nil {
			return line
		}
		n, line = next.value, next.line
		if !hasIdx {
			continue
		}
		i, err := strconv.Atoi(strings.TrimSuffix(idx, "]"))
		if err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
			return line
		}
		n = n.Content[i]
		line = n.Line
	}
	return line
}

type member struct {
	value *yaml.Node
	line  int
}

func mappingValue(n *yaml.Node, key string) *member {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return &member{value: n.Content[i+1], line: n.Content[i].Line}
		}
	}
	return nil
}
