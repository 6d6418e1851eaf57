package conffile_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratescope/ratescope/server/conffile"
)

// aliasBomb is a file of levels levels of ten aliases each to the level
// below: a few hundred bytes that expand to 10^levels nodes.
func aliasBomb(levels int) string {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - &l0 {key: a}\n")
	for l := 1; l <= levels; l++ {
		fmt.Fprintf(&b, "  - &l%d {key: a, descriptors: [%s]}\n", l, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d,", l-1), 10), ","))
	}
	return b.String()
}

// TestDecodeRefusesAliasBombs: a file whose aliases would expand it
// millions of times over is refused at once, whatever its depth; one that
// refers to itself (which, followed, never ends) too.
func TestDecodeRefusesAliasBombs(t *testing.T) {
	for _, levels := range []int{4, 7, 12} {
		data := aliasBomb(levels)
		start := time.Now()
		_, err := conffile.Decode([]byte(data))
		if !errors.Is(err, conffile.ErrExcessiveAliasing) {
			t.Fatalf("%d levels (%d bytes): %v, want excessive aliasing", levels, len(data), err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%d levels: refused after %v", levels, d)
		}
	}
	for _, data := range []string{"descriptors: &a [{key: a, descriptors: *a}]\n", "a: &a {b: *a}\n"} {
		if _, err := conffile.Decode([]byte(data)); err == nil || !strings.Contains(err.Error(), "refers to a node that contains it") {
			t.Fatalf("%q: %v, want it refused as a cycle", data, err)
		}
	}
}

// TestDecodeTakesAliasesInReason: anchors shared by many descriptors, and
// merge keys, are what people write; they are within the bound.
func TestDecodeTakesAliasesInReason(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: shop\nx: &perMinute {unit: minute, requests_per_unit: 5}\ndescriptors:\n")
	for i := range 2000 {
		fmt.Fprintf(&b, "  - key: k%d\n    rate_limit: {<<: *perMinute, name: n%d}\n", i, i)
	}
	if _, err := conffile.Decode([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	// The bound's edge: an anchor of 400 nodes used 90 times in a small file
	// expands it a hundredfold — taken — and used 200 times, refused.
	big := "a: &a [" + strings.TrimSuffix(strings.Repeat("1,", 399), ",") + "]\n"
	for uses, ok := range map[int]bool{90: true, 200: false} {
		data := big + "b: [" + strings.TrimSuffix(strings.Repeat("*a,", uses), ",") + "]\n"
		if _, err := conffile.Decode([]byte(data)); (err == nil) != ok {
			t.Errorf("an anchor of 400 nodes used %d times: %v", uses, err)
		}
	}
}

// TestReadRegularFilesOnly: a regular file, or a link to one, is read; a
// named pipe, a device, a socket or a folder is refused without blocking
// and without reading, naming what it is; a file over MaxSize is refused.
func TestReadRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(at("ok.yaml"), []byte("domain: ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ok.yaml", at("link.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ok.yaml", "link.yaml"} {
		if b, err := conffile.Read(at(name)); err != nil || string(b) != "domain: ok\n" {
			t.Fatalf("%s: %q, %v", name, b, err)
		}
	}
	if err := syscall.Mkfifo(at("fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", at("zero.yaml")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", at("sock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Mkdir(at("dir.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	big, err := os.Create(at("big.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(conffile.MaxSize + 1); err != nil {
		t.Fatal(err)
	}
	big.Close()
	for _, tc := range []struct{ name, want string }{
		{"fifo.yaml", "not a regular file (a named pipe)"},
		{"sock.yaml", "not a regular file (a socket)"},
		{"dir.yaml", "not a regular file (a folder)"},
		{"big.yaml", "larger than 10 MiB"},
		{"zero.yaml", "not a regular file (a character device)"}, // last: read unguarded, it never ends
	} {
		name, want := tc.name, tc.want
		done := make(chan error, 1)
		go func() { _, err := conffile.Read(at(name)); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want %q", name, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still reading after 10 s", name)
		}
	}
	exact := make([]byte, conffile.MaxSize)
	if err := os.WriteFile(at("max.yaml"), exact, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := conffile.Read(at("max.yaml")); err != nil || len(b) != conffile.MaxSize {
		t.Fatalf("a file of MaxSize bytes: %d bytes, %v", len(b), err)
	}
}

// TestProblemsListed: a file of many problems is refused with the first
// MaxListed and how many more there were.
func TestProblemsListed(t *testing.T) {
	var errs []error
	for i := range 1000 {
		errs = append(errs, fmt.Errorf("problem %d", i))
	}
	msg := conffile.Join(errs).Error()
	lines := strings.Split(msg, "\n")
	if len(lines) != conffile.MaxListed+1 || lines[0] != "problem 0" || lines[len(lines)-1] != "… and 980 more problems" {
		t.Fatalf("%d lines:\n%s", len(lines), msg)
	}
	if got := conffile.Join(errs[:3]).Error(); got != "problem 0\nproblem 1\nproblem 2" {
		t.Fatalf("three problems: %q", got)
	}
	if conffile.Join(nil) != nil {
		t.Fatal("no problems, an error")
	}
}
