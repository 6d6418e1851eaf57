package redisconn_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLinksNoHTTP: connecting to Redis needs no web framework, no templates,
// no HTTP and nothing of the server, so anything that talks to Redis (the
// server, the load tool, a test) can connect without linking those.
func TestLinksNoHTTP(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	// Each with the packages under it.
	forbidden := []string{
		"github.com/labstack", // Echo
		"github.com/a-h/templ",
		"github.com/gin-gonic",
		"github.com/go-chi",
		"github.com/gorilla",
		"github.com/gofiber",
		"github.com/coder/websocket",
		"google.golang.org/grpc",
		"net/http",
		"github.com/ratescope/ratescope/views",
		"github.com/ratescope/ratescope/limiter/httplimit",
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("redisconn depends on %s", dep)
			}
		}
		if dep == "github.com/ratescope/ratescope/server" {
			t.Errorf("redisconn depends on its parent, %s", dep)
		}
	}
}
