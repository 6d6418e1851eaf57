package server

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ratescope/ratescope/server/envoyconf"
)

// ratescopeConfig matches a YAML block that is a ratescope config file (its
// top-level keys), not a proxy's or Envoy's.
var ratescopeConfig = regexp.MustCompile(`(?m)^(policies|routes|envoy|trustedProxies|unmatched):`)

// envoyFileBlock matches a YAML block in envoyproxy/ratelimit's format.
var envoyFileBlock = regexp.MustCompile(`(?m)\A(#.*\n)*domain:`)

// TestDocsConfigFilesLoad: every ratescope config file printed in the README
// and docs/, and the example in config/, loads as ratescope loads it at
// start-up, and every envoyproxy/ratelimit file printed loads as
// --envoy-config-dir loads it, so none is wrong as printed. (The proxies' own configs are run by the proxy tests.)
func TestDocsConfigFilesLoad(t *testing.T) {
	pages, _ := filepath.Glob("../docs/*.md")
	pages = append(pages, "../README.md")
	yamlBlock := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	n, envoyFiles := 0, 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range yamlBlock.FindAllStringSubmatch(string(b), -1) {
			if envoyFileBlock.MatchString(m[1]) {
				envoyFiles++
				if _, err := envoyconf.Parse([]envoyconf.File{{Name: "printed.yaml", Data: []byte(m[1])}}, envoyconf.Options{}); err != nil {
					t.Errorf("%s, YAML block %d does not load as envoyproxy/ratelimit's file: %v\n%s", page, i+1, err, m[1])
				}
				continue
			}
			if !ratescopeConfig.MatchString(m[1]) || strings.Contains(m[1], "static_resources:") {
				continue
			}
			n++
			path := filepath.Join(t.TempDir(), "ratescope.yaml")
			if err := os.WriteFile(path, []byte(m[1]), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := newConfigStore(Config{ConfigFile: path}, newMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Errorf("%s, YAML block %d does not load: %v\n%s", page, i+1, err, m[1])
			}
		}
	}
	// The example the compose file mounts, as it stands.
	if _, err := newConfigStore(Config{ConfigFile: "../config/ratescope.yaml"}, newMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Errorf("config/ratescope.yaml does not load: %v", err)
	}
	// The config file the Kubernetes manifests mount, from their ConfigMap.
	manifests, err := os.ReadFile("../deploy/kubernetes/ratescope.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mounted := 0
	dec := yaml.NewDecoder(strings.NewReader(string(manifests)))
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&doc); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("deploy/kubernetes/ratescope.yaml: %v", err)
		}
		if file, ok := doc.Data["ratescope.yaml"]; ok && doc.Kind == "ConfigMap" {
			mounted++
			path := filepath.Join(t.TempDir(), "ratescope.yaml")
			if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := newConfigStore(Config{ConfigFile: path}, newMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
				t.Errorf("the Kubernetes ConfigMap's ratescope.yaml does not load: %v\n%s", err, file)
			}
		}
	}
	if mounted != 1 {
		t.Errorf("deploy/kubernetes/ratescope.yaml holds %d ConfigMaps with a ratescope.yaml, want 1", mounted)
	}
	if envoyFiles == 0 {
		t.Error("found no envoyproxy/ratelimit config file in the docs, want the Envoy page's")
	}
	if n < 3 {
		t.Errorf("found %d ratescope config files in the docs, want the README's and the reference's", n)
	}
}
