package bus_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/ratescope/ratescope/static"
)

// TestMessageTypesMatchThePage: the page names the stream's message types in
// MSG (static/js/messages.js), the Go side in this package's Type constants.
// A kind added, renamed or respelled on one side only would be a message the
// page silently ignores, or a handler that never runs.
func TestMessageTypesMatchThePage(t *testing.T) {
	goKinds, jsKinds := goMessageTypes(t), jsMessageTypes(t)
	for _, name := range slices.Sorted(maps.Keys(goKinds)) {
		js, ok := jsKinds[name]
		switch {
		case !ok:
			t.Errorf("Go declares %q (%s) but MSG in messages.js has no %s", goKinds[name], goName(name), name)
		case js != goKinds[name]:
			t.Errorf("MSG.%s is %q in messages.js but %q in Go (%s)", name, js, goKinds[name], goName(name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(jsKinds)) {
		if _, ok := goKinds[name]; !ok {
			t.Errorf("MSG.%s (%q) in messages.js has no %s in internal/bus", name, jsKinds[name], goName(name))
		}
	}
}

// goMessageTypes reads every constant named Type… in this package's source,
// keyed by its name in MSG's spelling (TypeLabReset → LAB_RESET). Reading the
// source rather than a list kept beside the constants means a kind added to
// the block is seen without anyone remembering a second place.
func goMessageTypes(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatalf("failed to list the package's files: %v", err)
	}
	out := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("failed to parse %s: %v", name, err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Type") {
						continue
					}
					lit, ok := valueAt(vs, i).(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is not a string literal; declare every message type as one", fset.Position(id.Pos()), id.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatalf("failed to unquote %s: %v", id.Name, err)
					}
					out[jsName(id.Name)] = v
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("found no Type constants in internal/bus")
	}
	return out
}

func valueAt(vs *ast.ValueSpec, i int) ast.Expr {
	if i < len(vs.Values) {
		return vs.Values[i]
	}
	return nil
}

var (
	msgBlockRE = regexp.MustCompile(`(?s)export const MSG = Object\.freeze\(\{(.*?)\}\);`)
	msgEntryRE = regexp.MustCompile(`(?m)^\s*([A-Z][A-Z0-9_]*)\s*:\s*'([^']*)'`)
)

// jsMessageTypes reads MSG's entries from the embedded messages.js.
func jsMessageTypes(t *testing.T) map[string]string {
	t.Helper()
	b, err := fs.ReadFile(static.FS, "js/messages.js")
	if err != nil {
		t.Fatalf("failed to read js/messages.js: %v", err)
	}
	block := msgBlockRE.FindSubmatch(b)
	if block == nil {
		t.Fatal("js/messages.js has no `export const MSG = Object.freeze({ … });`")
	}
	out := map[string]string{}
	for _, m := range msgEntryRE.FindAllSubmatch(block[1], -1) {
		out[string(m[1])] = string(m[2])
	}
	if len(out) == 0 {
		t.Fatal("found no entries in MSG")
	}
	return out
}

// jsName is a Go constant's name as MSG spells it: TypeLabReset → LAB_RESET.
func jsName(goConst string) string {
	var b strings.Builder
	for i, r := range strings.TrimPrefix(goConst, "Type") {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// goName is the Go constant for MSG's name: LAB_RESET → TypeLabReset.
func goName(js string) string {
	var b strings.Builder
	b.WriteString("Type")
	for part := range strings.SplitSeq(js, "_") {
		if part != "" {
			b.WriteString(part[:1] + strings.ToLower(part[1:]))
		}
	}
	return b.String()
}
