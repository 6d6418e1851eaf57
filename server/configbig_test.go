package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/server/conffile"
)

// bigEnvoyFile is a valid envoyproxy/ratelimit file of about size bytes: an
// eighth of it tenants with a limit per user, the rest a branch 240 levels
// deep holding tens of thousands of descriptors — where spelling out each
// descriptor's path and name from the root once cost memory growing with
// the depth times the file.
func bigEnvoyFile(size int) string {
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	for i := 0; b.Len() < size/8; i++ {
		fmt.Fprintf(&b, "  - key: tenant\n    value: t%07d\n    descriptors:\n      - key: user\n        rate_limit: {unit: minute, requests_per_unit: %d}\n", i, i%100+1)
	}
	const depth = 240
	b.WriteString("  - " + strings.Repeat("{key: d, descriptors: [", depth))
	for i := 0; b.Len() < size-3*depth; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "{key: c%x}", i)
	}
	b.WriteString("]" + strings.Repeat("}]", depth-1) + "}\n")
	return b.String()
}

// bigConfigFile is a valid config file of about size bytes: 2,000 policies
// and, for the rest, Envoy descriptors mapped to them — whose duplicates
// were once looked for in a list, at a cost growing with their square.
func bigConfigFile(size int) string {
	var b strings.Builder
	b.WriteString("policies:\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "  - {name: p%d, rules: [\"5/1m\"]}\n", i)
	}
	b.WriteString("envoy:\n  - domain: edge\n    descriptors:\n")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "      - {keys: [k%x], policy: p%d}\n", i, i%2000)
	}
	return b.String()
}

// TestBigConfigFilesLoad: valid files just under the size cap — an envoy
// file and a config file of bigFileBytes each — load in time and memory
// bounded by their size (generous ceilings: bigFileAllocPerByte bytes
// allocated per byte of the files, bigFileWithin to apply), first at a
// fifth of the size, so a loader that is not linear fails there before the
// full size costs the machine tens of GB. A file over the cap is refused with a
// log line saying so, and the running config stays.
func TestBigConfigFilesLoad(t *testing.T) {
	dir := t.TempDir()
	envoy := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(envoy, []byte("domain: big\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "policies: []\n")
	app := startApp(t, nil, "--envoy-config-dir", dir, "--config", cfg)
	// A reload reads and builds every file, changed or not: the bound is
	// on the bytes of both.
	applied, inForce := 0, map[string]int{}
	load := func(what, path, content string) {
		t.Helper()
		before, start := totalAlloc(), time.Now()
		replaceFile(t, path, content)
		waitForLine(t, app, bigFileWithin, reloadOK, applied)
		applied++
		inForce[path] = len(content)
		all := inForce[envoy] + inForce[cfg]
		used, took := totalAlloc()-before, time.Since(start)
		t.Logf("%s of %.1f MB (%.1f MB in all) applied in %v, the process allocating %d MB", what, float64(len(content))/1e6, float64(all)/1e6, took.Round(time.Millisecond), used>>20)
		if ceiling := uint64(all) * bigFileAllocPerByte; used > ceiling {
			t.Fatalf("%s of %.1f MB (%.1f MB in all): the process allocated %d MB applying it, more than %d MB", what, float64(len(content))/1e6, float64(all)/1e6, used>>20, ceiling>>20)
		}
	}
	for _, size := range []int{bigFileBytes / 5, bigFileBytes} {
		load("an envoy file", envoy, bigEnvoyFile(size))
		load("a config file", cfg, bigConfigFile(size))
	}
	v := version(t, app)
	if got := policyLimits(t, app); got["big.tenant_t0000000.user"] != 1 || got["p1999"] != 5 {
		t.Fatalf("the big files' policies are not in force: %d policies", len(got))
	}

	// Over the cap, by a comment: refused, naming the file; the running
	// config stays.
	comment := "# " + strings.Repeat("x", conffile.MaxSize) + "\n"
	for i, f := range []struct{ path, content string }{{envoy, "domain: big\n"}, {cfg, "policies: []\n"}} {
		replaceFile(t, f.path, f.content+comment)
		waitForLine(t, app, 30*time.Second, reloadRefused, i)
	}
	logs := app.Logs()
	for _, want := range []string{"failed to read " + envoy + ": larger than 10 MiB", "failed to read the config file " + cfg + ": larger than 10 MiB"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("no log line says %q:\n%s", want, grepLines(logs, "refused"))
		}
	}
	if got := version(t, app); got != v {
		t.Fatalf("version %s after refused files, want %s", got, v)
	}
}
