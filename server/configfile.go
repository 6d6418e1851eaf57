package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// fileConfig is the config file's layout (SPEC §7). Decoding is strict: a
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
// what a file being rewritten in place looks like for a moment.
func parseFile(b []byte) (*parsedFile, error) {
	if len(b) == 0 {
		return nil, errors.New("the file is empty; write at least one setting or a comment (or start without --config)")
	}
	out := &parsedFile{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&out.fileConfig); err != nil {
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		return nil, fmt.Errorf("failed to read the YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("failed to read the YAML: it holds more than one document")
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err == nil {
		out.root = &root
	}
	return out, nil
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
