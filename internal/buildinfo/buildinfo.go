// Package buildinfo says which build of ratescope is running: what
// `ratescope --version` prints, the ratescope_build_info metric carries and
// the load tool writes in its reports.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are stamped at link time by the Dockerfile:
//
//	go build -ldflags "-X github.com/ratescope/ratescope/internal/buildinfo.version=v1.2.0
//	    -X github.com/ratescope/ratescope/internal/buildinfo.commit=0123abcd…"
//
// Left empty, they come from the binary's build info: the module version of
// `go install …@v1.2.0`, or the version and revision Go stamps on a build in
// a git checkout.
var version, commit string

// Info is one build.
type Info struct {
	Version   string // v1.2.0, a pseudo-version, or "devel"
	Commit    string // the git revision (+"-dirty" for uncommitted changes), or "unknown"
	GoVersion string // go1.26.8
}

// String is the --version line: ratescope v1.2.0 (commit 0123abcd, go1.26.8).
func (b Info) String() string {
	return fmt.Sprintf("ratescope %s (commit %s, %s)", b.Version, b.Commit, b.GoVersion)
}

// Read reports this binary's build: the link-time stamps when set, else
// what the Go toolchain recorded.
func Read() Info {
	b := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if info, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
		var revision, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if b.Commit == "" && revision != "" {
			b.Commit = revision
			if modified == "true" {
				b.Commit += "-dirty"
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}
