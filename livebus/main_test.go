package livebus_test

import (
	"os"
	"testing"

	"github.com/ratescope/ratescope/internal/redistest"
)

// TestMain says once, after the tests, what a missing redis-server cost.
func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }
