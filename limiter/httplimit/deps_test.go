package httplimit_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLinksNoFramework: a net/http service that imports httplimit links no
// web framework; the Echo adapter lives in echolimit.
func TestLinksNoFramework(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.Contains(dep, "labstack") {
			t.Errorf("httplimit depends on %s", dep)
		}
	}
}
