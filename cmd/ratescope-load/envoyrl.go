package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/ratescope/ratescope/internal/redistest"
)

// envoyproxy/ratelimit itself: built from its source and started for the
// Envoy and scripts phases.

// envoyRepo is where envoyproxy/ratelimit's source is cloned from when
// --envoy-rl-src is not given.
const envoyRepo = "https://github.com/envoyproxy/ratelimit.git"

// buildEnvoyRL builds envoyproxy/ratelimit's service into dir from src (a
// checkout, or a git repository to clone; empty: a shallow clone of
// envoyRepo), with its dependencies from the module proxy. It returns the
// binary and the source's revision.
func buildEnvoyRL(ctx context.Context, src, dir string) (bin, rev string, err error) {
	if _, err := os.Stat(filepath.Join(src, "src", "service_cmd")); src == "" || err != nil {
		from := orDefault(src, envoyRepo)
		clone := filepath.Join(dir, "envoy-rl-src")
		if out, err := exec.CommandContext(ctx, "git", "clone", "--quiet", "--depth", "1", from, clone).CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("failed to clone envoyproxy/ratelimit from %s (pass --envoy-rl-src with a checkout): %w: %s", from, err, out)
		}
		src = clone
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", src, "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		rev = "commit " + string(out[:len(out)-1])
	} else {
		rev = "an unversioned copy"
	}
	bin = filepath.Join(dir, "envoy-rl")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./src/service_cmd")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("failed to build envoyproxy/ratelimit in %s: %w: %s", src, err, out)
	}
	return bin, rev, nil
}

// startEnvoyRL runs envoyproxy/ratelimit with env (its own variables) plus
// its HTTP, debug and metrics ports on free ports, and waits until its
// /healthcheck answers.
func startEnvoyRL(ctx context.Context, dir, bin string, env []string, logName string) (*serverProc, error) {
	ports := make([]string, 3)
	for i := range ports {
		p, err := redistest.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = strconv.Itoa(p)
	}
	env = append(os.Environ(), append(env,
		"HOST=127.0.0.1", "PORT="+ports[0], "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+ports[1],
		"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:"+ports[2], "LOG_LEVEL=warn")...)
	c, err := startChild("envoyproxy/ratelimit", filepath.Join(dir, logName), env, bin)
	if err != nil {
		return nil, err
	}
	s := &serverProc{child: c, addr: "127.0.0.1:" + ports[0]}
	if err := c.waitReady(ctx, func() error { return s.answers("/healthcheck") }); err != nil {
		c.stop()
		return nil, err
	}
	return s, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
