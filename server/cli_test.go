package server_test

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratescope/ratescope/server"
)

// run runs the command line as main does and returns its error and stdout.
func run(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := server.Run(ctx, append([]string{"ratescope"}, args...), func(k string) string { return env[k] }, &out)
	return out.String(), err
}

// TestVersion: --version prints the version, commit and Go version and
// exits 0, whatever else is configured.
func TestVersion(t *testing.T) {
	out, err := run(t, map[string]string{"RATESCOPE_FAIL_MODE": "opne"}, "--version")
	if err != nil {
		t.Fatalf("--version: %v", err)
	}
	if !regexp.MustCompile(`^ratescope \S+ \(commit \S+, go1\.\d+`).MatchString(out) {
		t.Fatalf("--version printed %q", out)
	}
}

// TestHelp: --help is a synopsis with the subcommand, the policy syntax and
// every flag with its environment twin, on stdout, and exits 0.
func TestHelp(t *testing.T) {
	out, err := run(t, nil, "--help")
	if err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{
		"Usage:", "ratescope healthcheck", "ratescope --version",
		"NAME=LIMIT/WINDOW[,LIMIT/WINDOW…][@ALGORITHM][+shadow]", "log, fixed, counter, gcra, bucket",
		"[+tz=ZONE]", "plan=10/1s,100000/month+tz=America/New_York",
		"--log-level", "RATESCOPE_LOG_LEVEL", "--fail-mode", "RATESCOPE_FAIL_MODE", "default 150ms",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	if out, err := run(t, nil, "healthcheck", "--help"); err != nil || !strings.Contains(out, "Usage: ratescope healthcheck") {
		t.Errorf("healthcheck --help: %v\n%s", err, out)
	}
}

// TestCommandLineErrors: an error names what the user set — the flag, or
// the environment variable when no flag was given — and is said once: the
// flag package prints nothing of its own.
func TestCommandLineErrors(t *testing.T) {
	for _, tc := range []struct {
		env        map[string]string
		args       []string
		want, lack string
	}{
		{map[string]string{"RATESCOPE_FAIL_MODE": "opne"}, nil, `RATESCOPE_FAIL_MODE="opne"`, "--fail-mode"},
		{map[string]string{"RATESCOPE_FAIL_MODE": "open"}, []string{"--fail-mode", "opne"}, `--fail-mode "opne"`, "RATESCOPE_FAIL_MODE"},
		{map[string]string{"RATESCOPE_LOG_LEVEL": "verbose"}, nil, `RATESCOPE_LOG_LEVEL="verbose": want debug, info, warn or error`, "--log-level"},
		{nil, []string{"--log-level", "info+2"}, `--log-level "info+2"`, ""},
		{map[string]string{"RATESCOPE_LOG_FORMAT": "yaml"}, nil, `RATESCOPE_LOG_FORMAT="yaml"`, "--log-format"},
		{map[string]string{"RATESCOPE_TICK_INTERVAL": "1ms"}, nil, `RATESCOPE_TICK_INTERVAL="1ms"`, "--tick-interval"},
		{map[string]string{"RATESCOPE_CHECK_TIMEOUT": "-1s"}, nil, `RATESCOPE_CHECK_TIMEOUT="-1s"`, "--check-timeout"},
		{map[string]string{"RATESCOPE_DENY_CACHE_SIZE": "-1"}, nil, `RATESCOPE_DENY_CACHE_SIZE="-1"`, "--deny-cache-size"},
		{map[string]string{"RATESCOPE_GRPC_ADDR": "nowhere"}, nil, `RATESCOPE_GRPC_ADDR="nowhere"`, "--grpc-addr"},
		{map[string]string{"RATESCOPE_MAX_VIEWERS": "-1"}, nil, `RATESCOPE_MAX_VIEWERS="-1"`, "--max-viewers"},
		{nil, []string{"--max-conns-per-client", "-2"}, `--max-conns-per-client "-2"`, "RATESCOPE_"},
		{map[string]string{"RATESCOPE_TRUSTED_PROXIES": "bogus"}, nil, `RATESCOPE_TRUSTED_PROXIES="bogus"`, "--trusted-proxies"},
		{map[string]string{"RATESCOPE_POLICIES": "a=5"}, nil, `RATESCOPE_POLICIES: policy "a"`, "--policy"},
		{nil, []string{"--policy", "a=5"}, `--policy: policy "a"`, "RATESCOPE_POLICIES"},
		{nil, []string{"--version2"}, "flag provided but not defined: -version2 (ratescope --help lists the flags)", ""},
	} {
		out, err := run(t, tc.env, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.lack != "" && strings.Contains(err.Error(), tc.lack)) {
			t.Errorf("env %v args %v: err = %v, want it to say %q and not %q", tc.env, tc.args, err, tc.want, tc.lack)
		}
		if out != "" {
			t.Errorf("env %v args %v: printed %q besides the error", tc.env, tc.args, out)
		}
	}
}

// TestConfigFileErrorsNameFields: a misspelt or mistyped field is named as
// the file has it, never by a Go type.
func TestConfigFileErrorsNameFields(t *testing.T) {
	for file, want := range map[string]string{
		"polices: []\n": "line 1: field polices not found: the file's top level has no such setting",
		"routes:\n  - policy: demo\n    match: {path: /x}\n":       "line 3: field path not found: routes[0].match has no such setting",
		"routes:\n  - policy: demo\n    cost: abc\n":               "line 3: routes[0].cost: want a whole number, not `abc`",
		"routes:\n  - policy: demo\n    match: {methods: POST}\n":  "line 3: routes[0].match.methods: want a list of strings, not `POST`",
		"policies:\n  - {name: a, rules: [5/1m], shadow: maybe}\n": "line 2: policies[0].shadow: want true or false, not `maybe`",
		"routes: {policy: demo}\n":                                 "line 1: routes: want a list, not a mapping",
	} {
		_, err := run(t, nil, "--addr", "127.0.0.1:0", "--redis-url", "redis://127.0.0.1:1/0", "--config", writeConfig(t, file))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "server.") || strings.Contains(err.Error(), "!!") {
			t.Errorf("%q: err = %v, want it to say %q", file, err, want)
		}
	}
}

// TestLogLevel: checks are logged at debug, which --log-level debug (or
// RATESCOPE_LOG_LEVEL) turns on; the start-up line writes policies as they
// are configured.
func TestLogLevel(t *testing.T) {
	quiet := startApp(t, nil)
	loud := startApp(t, map[string]string{"RATESCOPE_LOG_LEVEL": "debug"}, "--policy", "login=5/60s,20/3600s")
	for _, url := range []string{quiet.URL, loud.URL} {
		if r := do(t, "POST", url+"/api/v1/check?key=k1&policy=demo", ""); r.status != 200 {
			t.Fatalf("check %d", r.status)
		}
	}
	checkLine := regexp.MustCompile(`level=DEBUG msg=request method=POST path=/api/v1/check status=200`)
	waitFor(t, 5*time.Second, "the debug access line", func() bool { return checkLine.MatchString(loud.Logs()) })
	if checkLine.MatchString(quiet.Logs()) {
		t.Errorf("at the default level a check was logged:\n%s", quiet.Logs())
	}
	if !strings.Contains(loud.Logs(), `policies="default=10/1m;demo=5/10s;login=5/1m,20/1h"`) &&
		!strings.Contains(loud.Logs(), `policies="login=5/1m,20/1h;default=10/1m;demo=5/10s"`) {
		t.Errorf("the start-up line does not write policies as configured:\n%s", grepLines(loud.Logs(), "listening"))
	}
}

// TestEveryFlagDocumented: each flag --help lists has its row in the
// configuration page's table.
func TestEveryFlagDocumented(t *testing.T) {
	out, err := run(t, nil, "--help")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := regexp.MustCompile(`(?m)^  (--[a-z-]+) `).FindAllStringSubmatch(out, -1)
	if len(flags) < 15 {
		t.Fatalf("--help lists %d flags:\n%s", len(flags), out)
	}
	for _, f := range flags {
		if !strings.Contains(string(b), "\n| `"+f[1]+"`") && !strings.Contains(string(b), "| `"+f[1]+"` /") {
			t.Errorf("%s has no row in docs/configuration.md's flags table", f[1])
		}
	}
}
