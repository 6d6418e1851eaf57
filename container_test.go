package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfile: no frontend to pull (a "# syntax=" line makes BuildKit
// fetch one from a registry), and the version stamp names variables that
// exist: a build with the Dockerfile's -ldflags reports them in --version.
func TestDockerfile(t *testing.T) {
	df := read(t, "Dockerfile")
	if regexp.MustCompile(`(?m)^#\s*syntax\s*=`).MatchString(df) {
		t.Error("the Dockerfile starts with a # syntax= line: BuildKit would pull a frontend image for it")
	}
	m := regexp.MustCompile(`-ldflags="([^"]+)"`).FindStringSubmatch(df)
	if m == nil {
		t.Fatal("the Dockerfile's go build has no -ldflags")
	}
	if testing.Short() {
		t.Skip("builds the binary")
	}
	ldflags := strings.NewReplacer("${VERSION}", "v9.8.7-test", "${COMMIT}", "c0ffee").Replace(m[1])
	bin := filepath.Join(t.TempDir(), "ratescope")
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags %q: %v\n%s", ldflags, err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ratescope v9.8.7-test (commit c0ffee, go1.") {
		t.Fatalf("--version of a stamped build: %q, %v", out, err)
	}
}

// TestDockerignore: the build context leaves out the runtime config, the
// docs and the git directory, so editing them neither rebuilds the binary nor
// stamps it as modified.
func TestDockerignore(t *testing.T) {
	lines := map[string]bool{}
	for _, l := range strings.Split(read(t, ".dockerignore"), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{".git", "config", "docs", "**/*_test.go"} {
		if !lines[want] {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}

// TestComposeConfigOption: the compose file's commented config option works
// as it stands — the file it names is the example in config/, mounted where
// RATESCOPE_CONFIG points, readable by the image's uid 65532.
func TestComposeConfigOption(t *testing.T) {
	compose := read(t, "docker-compose.yml")
	env := regexp.MustCompile(`#\s*RATESCOPE_CONFIG:\s*(\S+)`).FindStringSubmatch(compose)
	vol := regexp.MustCompile(`#\s*-\s*\./(\S+):(\S+):ro`).FindStringSubmatch(compose)
	if env == nil || vol == nil {
		t.Fatalf("docker-compose.yml has no commented RATESCOPE_CONFIG (%v) or ./dir:/dir:ro volume (%v)", env, vol)
	}
	rel, ok := strings.CutPrefix(env[1], vol[2]+"/")
	if !ok {
		t.Fatalf("RATESCOPE_CONFIG %s is not inside the mounted %s", env[1], vol[2])
	}
	local := filepath.Join(vol[1], rel)
	st, err := os.Stat(local)
	if err != nil {
		t.Fatalf("the compose option names %s, which the repository lacks: %v", local, err)
	}
	if st.Mode().Perm()&0o004 == 0 {
		t.Errorf("%s is %v: uid 65532 in the container could not read it", local, st.Mode().Perm())
	}
}
