package server_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/server"
)

// policyNames lists the policies /api/v1/policies lists.
func policyNames(t testing.TB, url string) []string {
	t.Helper()
	r := do(t, "GET", url+"/api/v1/policies", "")
	var names []string
	for _, p := range r.body["policies"].([]any) {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	return names
}

const envoyShopV1 = `domain: shop
descriptors:
  - key: cart
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// TestEnvoyFilesAreReloaded: the folder's limits are policies beside
// ratescope's own, checked like any other; a file broken on disk is refused
// with a log line naming file and field while the running set stays; fixed,
// it applies, with the window it had kept.
func TestEnvoyFilesAreReloaded(t *testing.T) {
	dir := t.TempDir()
	shop := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(shop, []byte(envoyShopV1), 0o644); err != nil {
		t.Fatal(err)
	}
	app := startApp(t, nil, "--envoy-config-dir", dir, "--policy", "login=5/1m", "--grpc-addr", "127.0.0.1:0")
	grpcCall := newRLSCaller(t, app.GRPCAddr, "shop")
	if got := policyNames(t, app.URL); !slices.Equal(got, []string{"default", "demo", "login", "shop.cart"}) {
		t.Fatalf("policies %v", got)
	}
	key := "shop:cart=" + newKey()
	check := func() response { return do(t, "POST", app.URL+"/api/v1/check?policy=shop.cart&key="+key, "") }
	for i := 1; i <= 2; i++ {
		if r := check(); r.status != 200 || num(t, r, "limit") != 2 {
			t.Fatalf("check %d: %d %s", i, r.status, r.raw)
		}
	}
	if r := check(); r.status != 429 {
		t.Fatalf("check 3 under 2/1m: %d %s", r.status, r.raw)
	}
	v1 := version(t, app)

	// Broken: an unknown key. Refused, logged with file and field; the
	// running set stays.
	replaceFile(t, shop, strings.Replace(envoyShopV1, "rate_limit:", "ratelimit:", 1))
	waitFor(t, 5*time.Second, "the broken file refused", func() bool {
		return regexp.MustCompile(`ratescope_config_reloads_total\{result="error"\} [1-9]`).MatchString(metrics(t, app))
	})
	if logs := app.Logs(); !strings.Contains(logs, `shop.yaml: descriptors[0].ratelimit (line 4): unknown key \"ratelimit\"`) {
		t.Fatalf("no log line names the file and field:\n%s", grepLines(logs, "reload"))
	}
	if v := version(t, app); v != v1 {
		t.Fatalf("version %s after a refused file, want %s", v, v1)
	}
	if r := check(); r.status != 429 {
		t.Fatalf("check under the running set: %d", r.status)
	}
	expect(t, "gRPC under the running set", grpcCall.call(desc("cart=x")), 0, codeOK, "shop.cart", 2, minute, 1, false)

	// Fixed, with a larger limit and a second file: both apply, and the
	// window kept its two entries.
	replaceFile(t, shop, strings.Replace(envoyShopV1, "requests_per_unit: 2", "requests_per_unit: 3", 1))
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 9}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the fixed files applied", func() bool {
		return slices.Contains(policyNames(t, app.URL), "edge.remote_address") && version(t, app) != v1
	})
	if r := check(); r.status != 200 || num(t, r, "count") != 3 || num(t, r, "limit") != 3 {
		t.Fatalf("check under 3/1m: %d %s", r.status, r.raw)
	}
	expect(t, "gRPC under the fixed file", grpcCall.call(desc("cart=x")), 0, codeOK, "shop.cart", 3, minute, 1, false)
}

// TestEnvoyFilesFromRuntimeVariables: with ratescope's own setting unset,
// envoyproxy/ratelimit's RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config is read,
// and the gRPC service listens where its GRPC_PORT says.
func TestEnvoyFilesFromRuntimeVariables(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte(envoyShopV1), 0o644); err != nil {
		t.Fatal(err)
	}
	app := startApp(t, map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0"})
	if got := policyNames(t, app.URL); !slices.Contains(got, "shop.cart") {
		t.Fatalf("policies %v", got)
	}
	if app.GRPCAddr == "" {
		t.Fatalf("no gRPC listener from GRPC_PORT:\n%s", app.Logs())
	}
}

// TestEnvoyFilesStopStartUp: a broken folder stops start-up naming the file
// and field, as a broken config file does.
func TestEnvoyFilesStopStartUp(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte("domain: shop\ndescriptors:\n  - key: cart\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--envoy-config-dir", dir}, {"--envoy-config-dir", filepath.Join(dir, "missing")}} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := server.Run(ctx, append([]string{"ratescope", "--addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, args...), func(string) string { return "" }, io.Discard)
		cancel()
		if err == nil {
			t.Fatalf("%v: started", args)
		}
		for _, want := range []string{"invalid configuration", "shop.yaml: descriptors[0].rate_limit.unit (line 4): invalid rate limit unit \"fortnight\""} {
			if strings.HasSuffix(args[1], "missing") {
				want = "failed to read the envoy config dir"
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%v: %v, want it to say %q", args, err, want)
			}
		}
	}
}
