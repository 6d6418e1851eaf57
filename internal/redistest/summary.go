package redistest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

// absent counts, for Run's summary, the tests a missing program cost: each
// skipped test or subtest, as `go test -v` lists them, and each top-level test
// that ran on the embedded Redis instead.
var absent = &absence{skipped: map[string]map[string]bool{}, fallback: map[string]bool{}}

type absence struct {
	mu       sync.Mutex
	skipped  map[string]map[string]bool // program → tests skipped for its lack
	fallback map[string]bool            // tests that ran on the embedded Redis for lack of redis-server
}

func topLevel(name string) string {
	top, _, _ := strings.Cut(name, "/")
	return top
}

func (a *absence) skip(program, test string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.skipped[program] == nil {
		a.skipped[program] = map[string]bool{}
	}
	a.skipped[program][test] = true
}

func (a *absence) embedded(test string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fallback[topLevel(test)] = true
}

// summary is one line per missing program, e.g.
//
//	redistest: redis-server not on PATH: 4 tests skipped, 27 ran on the embedded Redis instead; install it: apt-get install -y redis-server …
func (a *absence) summary() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	programs := make([]string, 0, len(a.skipped)+1)
	for p := range a.skipped {
		programs = append(programs, p)
	}
	if len(a.fallback) > 0 && a.skipped["redis-server"] == nil {
		programs = append(programs, "redis-server")
	}
	slices.Sort(programs)
	var lines []string
	for _, p := range programs {
		var cost []string
		if n := len(a.skipped[p]); n > 0 {
			cost = append(cost, tests(n)+" skipped")
		}
		if n := len(a.fallback); p == "redis-server" && n > 0 {
			cost = append(cost, tests(n)+" ran on the embedded Redis instead")
		}
		lines = append(lines, fmt.Sprintf("redistest: %s not on PATH: %s; install it: %s", p, strings.Join(cost, ", "), InstallHint(p)))
	}
	return lines
}

func tests(n int) string {
	if n == 1 {
		return "1 test"
	}
	return fmt.Sprintf("%d tests", n)
}

// shared is the Redis behind Shared.
var shared = &sharedRedis{}

type sharedRedis struct {
	mu    sync.Mutex
	u     string
	err   error
	dir   string
	close func()
}

func (s *sharedRedis) url() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.u != "" || s.err != nil {
		return s.u, s.err
	}
	s.dir, s.err = os.MkdirTemp("", "redistest-shared-")
	if s.err != nil {
		return "", fmt.Errorf("failed to create a folder for the shared Redis: %w", s.err)
	}
	var kind Kind
	s.u, kind, s.close, s.err = AnyRedis(context.Background(), s.dir)
	if kind == Embedded && s.err == nil {
		absent.embedded("(the shared Redis)")
	}
	return s.u, s.err
}

func (s *sharedRedis) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.close != nil {
		s.close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
