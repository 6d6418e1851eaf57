package server_test

import (
	"os"
	"testing"

	"github.com/ratescope/ratescope/internal/apptest"
	"github.com/ratescope/ratescope/internal/redistest"
)

// TestMain says once, after the tests, what a missing redis-server cost: the
// tests that need a real one skip, the rest run on the embedded Redis. Run
// again by apptest.StartProcess, the binary is a server instead.
func TestMain(m *testing.M) {
	apptest.RunChild()
	os.Exit(redistest.Run(m))
}
