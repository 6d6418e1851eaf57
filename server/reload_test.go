package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratescope/ratescope/internal/apptest"
)

// policyLimits reads /api/v1/policies: each policy's first limit by name.
func policyLimits(t *testing.T, app *apptest.App) map[string]float64 {
	t.Helper()
	r := do(t, "GET", app.URL+"/api/v1/policies", "")
	out := map[string]float64{}
	for _, p := range r.body["policies"].([]any) {
		p := p.(map[string]any)
		out[p["name"].(string)] = p["rules"].([]any)[0].(map[string]any)["limit"].(float64)
	}
	return out
}

// twoPolicies is a config of policies first (limit n) and second: cut after
// first's entry it still parses, without second.
func twoPolicies(n int) (whole, firstHalf string) {
	firstHalf = fmt.Sprintf("policies:\n  - name: first\n    rules: [\"%d/1m\"]\n", n)
	return firstHalf + "  - name: second\n    rules: [\"5/1m\"]\n", firstHalf
}

// TestReloadWaitsForAWholeFile: a config file rewritten in place, slowly —
// its first half (which parses: it just lacks a policy) and, 50 ms later, the
// rest — is applied whole, once it has been stable for 100 ms, whether the
// watcher or a SIGHUP sent between the halves asks: policy second never
// vanishes, and nothing is refused on the way.
func TestReloadWaitsForAWholeFile(t *testing.T) {
	before, _ := twoPolicies(5)
	path := writeConfig(t, before)
	app := startApp(t, nil, "--config", path)
	for round, how := range []string{"watcher", "SIGHUP", "watcher", "SIGHUP"} {
		limit := 6 + round
		whole, half := twoPolicies(limit)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(half); err != nil {
			t.Fatal(err)
		}
		wrote := time.Now()
		if how == "SIGHUP" {
			if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(50 * time.Millisecond)
			_, _ = f.WriteString(whole[len(half):])
			f.Close()
		}()
		for {
			p := policyLimits(t, app)
			if _, ok := p["second"]; !ok {
				<-done
				t.Fatalf("%s: policy second vanished %v after the first half was written: %v",
					how, time.Since(wrote).Round(time.Millisecond), p)
			}
			if p["first"] == float64(limit) {
				break
			}
			if time.Since(wrote) > 5*time.Second {
				t.Fatalf("%s: the rewritten file was not applied: %v", how, p)
			}
			time.Sleep(2 * time.Millisecond)
		}
		<-done
		t.Logf("%s: applied %v after the first half", how, time.Since(wrote).Round(time.Millisecond))
		time.Sleep(300 * time.Millisecond) // the watcher's own reload of this write, if any, is done
	}
	if strings.Contains(app.Logs(), "config reload refused") {
		t.Fatalf("a half-written file was refused:\n%s", grepLines(app.Logs(), "config"))
	}
}

// TestReloadFollowsAFolderMadeAnew: the config file's folder moved away and
// made anew is watched again — its file applies within 2 s, and so does the
// next edit of it — as is the envoy folder; and a Kubernetes ConfigMap's
// update (a new ..data folder swapped in by renaming a symbolic link)
// applies too.
func TestReloadFollowsAFolderMadeAnew(t *testing.T) {
	const within = 2*time.Second + time.Second // a second more for a loaded machine
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	path := filepath.Join(dir, "ratescope.yaml")
	write := func(n int) {
		t.Helper()
		whole, _ := twoPolicies(n)
		if err := os.WriteFile(path, []byte(whole), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	applied := func(app *apptest.App, what string, n int) {
		t.Helper()
		start := time.Now()
		waitFor(t, within, what, func() bool { return policyLimits(t, app)["first"] == float64(n) })
		t.Logf("%s: applied after %v", what, time.Since(start).Round(time.Millisecond))
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(5)
	app := startApp(t, nil, "--config", path)

	if err := os.Rename(dir, filepath.Join(root, "config.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(6)
	applied(app, "the file in the folder made anew", 6)
	write(7)
	applied(app, "an edit in the folder made anew", 7)

	// A ConfigMap volume: ratescope.yaml -> ..data/ratescope.yaml, ..data ->
	// ..<timestamp>; an update writes a new timestamped folder and renames a
	// new ..data link over the old one.
	cm := filepath.Join(root, "configmap")
	version := func(n int) string {
		t.Helper()
		v := fmt.Sprintf("..2026_12_05_%02d", n)
		if err := os.MkdirAll(filepath.Join(cm, v), 0o755); err != nil {
			t.Fatal(err)
		}
		whole, _ := twoPolicies(n)
		if err := os.WriteFile(filepath.Join(cm, v, "ratescope.yaml"), []byte(whole), 0o644); err != nil {
			t.Fatal(err)
		}
		return v
	}
	v1 := version(8)
	if err := os.Symlink(v1, filepath.Join(cm, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "ratescope.yaml"), filepath.Join(cm, "ratescope.yaml")); err != nil {
		t.Fatal(err)
	}
	app = startApp(t, nil, "--config", filepath.Join(cm, "ratescope.yaml"))
	if n := policyLimits(t, app)["first"]; n != 8 {
		t.Fatalf("the ConfigMap's first version: first=%v, want 8", n)
	}
	v2 := version(9)
	if err := os.Symlink(v2, filepath.Join(cm, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(cm, "..data_tmp"), filepath.Join(cm, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(cm, v1)); err != nil {
		t.Fatal(err)
	}
	applied(app, "the ConfigMap's update", 9)

	// The envoy folder, moved away and made anew, likewise.
	envoyDir := filepath.Join(root, "envoy")
	shop := func(n int) {
		t.Helper()
		body := strings.Replace(envoyShopV1, "requests_per_unit: 2", fmt.Sprintf("requests_per_unit: %d", n), 1)
		if err := os.WriteFile(filepath.Join(envoyDir, "shop.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(envoyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	shop(2)
	app = startApp(t, nil, "--envoy-config-dir", envoyDir)
	if err := os.Rename(envoyDir, envoyDir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(envoyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	shop(3)
	start := time.Now()
	waitFor(t, within, "the envoy folder made anew", func() bool { return policyLimits(t, app)["shop.cart"] == 3 })
	t.Logf("the envoy folder made anew: applied after %v", time.Since(start).Round(time.Millisecond))
}
