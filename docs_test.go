package main

// Tests of the README and docs/: they describe the product in its own words,
// their links lead somewhere, and every Go snippet in them compiles.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docPages are the Markdown pages a user reads.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs/*.md pages (%v)", err)
	}
	return append([]string{"README.md", "BENCHMARKS.md", "CHANGELOG.md"}, pages...)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// contractCitation finds a citation of an outside contract: "SPEC", or a "§"
// that is not an RFC's section (RFC 3986 §5.2.4 is fine).
var contractCitation = regexp.MustCompile(`SPEC|[Ss]pec §|§`)
var rfcSection = regexp.MustCompile(`RFC ?\d+,? (section |§ ?)[\d.]+`)

// citations lists the lines of text that cite a contract.
func citations(text string) []string {
	var out []string
	for i, line := range strings.Split(text, "\n") {
		if contractCitation.MatchString(rfcSection.ReplaceAllString(line, "")) {
			out = append(out, fmt.Sprintf("line %d: %s", i+1, strings.TrimSpace(line)))
		}
	}
	return out
}

// TestDocsCiteNoContract: the README, docs/, the page's templates and its
// scripts describe the product on their own and never cite a SPEC or its §.
func TestDocsCiteNoContract(t *testing.T) {
	files := docPages(t)
	for _, pattern := range []string{"views/*.templ", "static/*.css", "static/js/*.js"} {
		m, _ := filepath.Glob(pattern)
		files = append(files, m...)
	}
	for _, f := range files {
		for _, c := range citations(read(t, f)) {
			t.Errorf("%s cites a contract the reader does not have: %s", f, c)
		}
	}
}

func TestCitationsFound(t *testing.T) {
	for text, want := range map[string]int{
		"as SPEC §4 says":                         1,
		"see spec §9":                             1,
		"the §3 problem document":                 1,
		"dot segments resolved (RFC 3986 §5.2.4)": 0,
		"RFC 9457":                                0,
	} {
		if got := len(citations(text)); got != want {
			t.Errorf("citations(%q) = %d, want %d", text, got, want)
		}
	}
}

// TestReadmeFitsANewcomer: a README read in five minutes, with the two
// commands as they are typed, links to the reference pages, and the license.
func TestReadmeFitsANewcomer(t *testing.T) {
	readme := read(t, "README.md")
	if len(readme) > 20*1024 {
		t.Errorf("README.md is %d bytes, want at most 20 KB: move reference material to docs/", len(readme))
	}
	for _, want := range []string{"go run .", "go test ./...", "go install ."} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
	pages := map[string]bool{}
	for _, m := range regexp.MustCompile(`\]\((docs/[a-z-]+\.md)`).FindAllStringSubmatch(readme, -1) {
		pages[m[1]] = true
	}
	if len(pages) < 5 {
		t.Errorf("README.md links %d docs/ pages, want at least 5", len(pages))
	}
	for _, f := range []string{"LICENSE", "CHANGELOG.md"} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(read(t, "LICENSE"), "Apache License\n                           Version 2.0") {
		t.Error("LICENSE is not the Apache License 2.0")
	}
}

var (
	fence      = regexp.MustCompile("(?s)```[a-z]*\n.*?```")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)|src="([^"]+)"`)
	heading    = regexp.MustCompile(`(?m)^#+ (.+)$`)
	notAnchor  = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	goSnippets = regexp.MustCompile("(?s)```go\n(.*?)```")
)

// anchors are the fragment names GitHub gives a page's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		a := strings.ToLower(strings.TrimSpace(m[1]))
		a = strings.ReplaceAll(notAnchor.ReplaceAllString(a, ""), " ", "-")
		out[a] = true
	}
	return out
}

// TestDocsLinksResolve: every relative link and image in the pages points to
// a file that exists and, with a #fragment, to one of its headings.
func TestDocsLinksResolve(t *testing.T) {
	for _, page := range docPages(t) {
		text := read(t, page)
		for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			link := m[1] + m[2]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(link, "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), file)
			}
			b, err := os.ReadFile(target)
			if err != nil {
				t.Errorf("%s links %s: %v", page, link, err)
				continue
			}
			if frag != "" && strings.HasSuffix(target, ".md") && !anchors(string(b))[frag] {
				t.Errorf("%s links %s: %s has no heading #%s", page, link, target, frag)
			}
		}
	}
}

// TestGoSnippetsCompile builds every ```go block of the README and docs/ as
// a package of its own inside this module (through an overlay, so nothing is
// written to the tree): a snippet that does not compile as printed fails.
// Each block must be a whole file, from its package clause on.
func TestGoSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every snippet with go build")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	where := map[string]string{}
	for _, page := range docPages(t) {
		for i, m := range goSnippets.FindAllStringSubmatch(read(t, page), -1) {
			name := fmt.Sprintf("%s_%d", strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(page), i+1)
			if !strings.HasPrefix(strings.TrimSpace(m[1]), "package ") {
				t.Errorf("%s, Go snippet %d: not a whole file (starts %.40q); print the package clause and imports", page, i+1, m[1])
				continue
			}
			src := filepath.Join(dir, name+".go")
			if err := os.WriteFile(src, []byte(m[1]), 0o644); err != nil {
				t.Fatal(err)
			}
			pkg := "./internal/docsnippets/" + name
			overlay[filepath.Join(wd, pkg, "snippet.go")] = src
			pkgs = append(pkgs, pkg)
			where[src] = fmt.Sprintf("%s, Go snippet %d", page, i+1)
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("no Go snippets found: the README shows the middleware")
	}
	ov, _ := json.Marshal(map[string]any{"Replace": overlay})
	ovPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	// With more than one package, go build compiles and discards: no binary
	// is linked or written (./limiter makes it more than one).
	cmd := exec.Command("go", append([]string{"build", "-overlay", ovPath, "./limiter"}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		report := string(out)
		for src, w := range where {
			report = strings.ReplaceAll(report, src, w)
		}
		t.Fatalf("the docs' Go snippets do not compile:\n%s", report)
	}
	t.Logf("%d Go snippets compiled", len(pkgs))
}

// proxyConfig finds the fenced proxy configs of a page: Caddy, nginx, and
// the YAML of Traefik and Envoy (a ratescope config file is checked by the
// server's tests instead).
var proxyConfig = regexp.MustCompile("(?s)```(caddyfile|nginx|yaml)\n(.*?)```")

func proxyConfigs(text string) []string {
	var out []string
	for _, m := range proxyConfig.FindAllStringSubmatch(text, -1) {
		if m[1] != "yaml" || strings.Contains(m[2], "static_resources:") || strings.Contains(m[2], "forwardAuth:") || strings.Contains(m[2], "http_filters:") {
			out = append(out, m[2])
		}
	}
	return out
}

// TestReadmeProxyConfigsAreTheTestedOnes: a proxy config the README prints is
// one of the reference pages' (docs/proxies.md, docs/envoy.md), which the
// proxy tests run as printed — so the README's cannot drift from a config
// that works.
func TestReadmeProxyConfigsAreTheTestedOnes(t *testing.T) {
	reference := read(t, "docs/proxies.md") + read(t, "docs/envoy.md")
	configs := proxyConfigs(read(t, "README.md"))
	if len(configs) == 0 {
		t.Fatal("the README shows no proxy config")
	}
	tested := proxyConfigs(reference)
	for _, c := range configs {
		if !slices.Contains(tested, c) {
			t.Errorf("the README's proxy config is not one of docs/proxies.md's or docs/envoy.md's as printed:\n%s", c)
		}
	}
}
