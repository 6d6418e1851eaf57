package rls_test

import (
	"os"
	"testing"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestMain says once, after the tests, what a missing redis-server cost: the
// tests that need a real one skip, the rest run on the embedded Redis.
func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }
