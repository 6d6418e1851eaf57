package envoyconf_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratescope/ratescope/server/conffile"
	"github.com/ratescope/ratescope/server/envoyconf"
)

// allocated is how many bytes f allocates (the whole process's, so a
// ceiling must be generous).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// aliasBomb is a file of levels levels of ten aliases each to the level
// below: 10^levels descriptors once its aliases are followed.
func aliasBomb(levels int) []byte {
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - &l0 {key: a}\n")
	for l := 1; l <= levels; l++ {
		fmt.Fprintf(&b, "  - &l%d {key: a, descriptors: [%s]}\n", l, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d,", l-1), 10), ","))
	}
	return []byte(b.String())
}

// TestAliasBombRefused: a file of nested aliases is refused before any alias
// is followed, naming the file. Followed, six levels cost ~800 MB; seven (a
// file of 554 bytes, the shape that grew a process past 6 GB) ten times that,
// so the seventh is tried only once the sixth proved cheap.
func TestAliasBombRefused(t *testing.T) {
	const ceiling = 64 << 20
	for _, levels := range []int{6, 7} {
		data := aliasBomb(levels)
		var err error
		start := time.Now()
		used := allocated(func() {
			_, err = envoyconf.Parse([]envoyconf.File{{Name: "bomb.yaml", Data: data}}, envoyconf.Options{})
		})
		if used > ceiling {
			t.Fatalf("%d levels (%d bytes): allocated %d MB loading it, more than %d MB (in %v)", levels, len(data), used>>20, ceiling>>20, time.Since(start))
		}
		if err == nil || !strings.Contains(err.Error(), "bomb.yaml: failed to read the YAML: document contains excessive aliasing") {
			t.Fatalf("%d levels: %v, want it refused for excessive aliasing", levels, err)
		}
	}
	// An alias to what contains it never ends when followed.
	_, err := envoyconf.Parse([]envoyconf.File{{Name: "loop.yaml", Data: []byte("domain: loop\ndescriptors: &d\n  - {key: a, descriptors: *d}\n")}}, envoyconf.Options{})
	if err == nil || !strings.Contains(err.Error(), "loop.yaml: failed to read the YAML: the alias *d on line 3 refers to a node that contains it") {
		t.Fatalf("a cycle: %v", err)
	}
}

// TestNamesBounded: a name (domain, keys and values down to a descriptor)
// longer than MaxNameBytes is refused, so one long value above many limits,
// or a tree thousands of levels deep, cannot cost memory growing with the
// square of the file; a name of exactly MaxNameBytes is taken.
func TestNamesBounded(t *testing.T) {
	fits := strings.Repeat("v", envoyconf.MaxNameBytes-len("edge.key_"))
	s, err := envoyconf.Parse([]envoyconf.File{{Name: "edge.yaml", Data: []byte("domain: edge\ndescriptors:\n  - key: key\n    value: " + fits + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}}, envoyconf.Options{})
	if err != nil || len(s.Policies()[0].Name) != envoyconf.MaxNameBytes {
		t.Fatalf("a name of MaxNameBytes: %v", err)
	}
	var long strings.Builder
	long.WriteString("domain: edge\ndescriptors:\n  - key: key\n    value: " + fits + "\n    descriptors:\n")
	for i := range 1000 {
		fmt.Fprintf(&long, "      - {key: u%d, rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	_, err = envoyconf.Parse([]envoyconf.File{{Name: "edge.yaml", Data: []byte(long.String())}}, envoyconf.Options{})
	if err == nil || !strings.Contains(err.Error(), `edge.yaml: descriptors[0].descriptors[0] (line 6): the descriptor's name "edge.key_vvv`) ||
		!strings.Contains(err.Error(), fmt.Sprintf("is %d bytes long; a name (domain, keys and values) may have at most %d", envoyconf.MaxNameBytes+4, envoyconf.MaxNameBytes)) {
		t.Fatalf("a name over MaxNameBytes: %v", err)
	}
	deep := "domain: deep\ndescriptors: " + strings.Repeat("[{key: a, descriptors: ", 2000) + "[]" + strings.Repeat("}]", 2000) + "\n"
	var used uint64
	used = allocated(func() {
		_, err = envoyconf.Parse([]envoyconf.File{{Name: "deep.yaml", Data: []byte(deep)}}, envoyconf.Options{})
	})
	if err == nil || !strings.Contains(err.Error(), "may have at most") {
		t.Fatalf("a tree 2,000 levels deep: %v", err)
	}
	if used > 64<<20 {
		t.Fatalf("a tree 2,000 levels deep (%d bytes) allocated %d MB", len(deep), used>>20)
	}
}

// TestManyProblemsListedBriefly: a file of many problems — here a mapping
// of 300,000 unknown keys, which once took minutes — is refused in
// time linear in it, with the first problems listed and the rest counted.
func TestManyProblemsListedBriefly(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: wide\n")
	for i := range 300_000 {
		fmt.Fprintf(&b, "k%07d: 1\n", i)
	}
	start := time.Now()
	_, err := envoyconf.Parse([]envoyconf.File{{Name: "wide.yaml", Data: []byte(b.String())}}, envoyconf.Options{})
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("refused after %v", d)
	}
	if err == nil {
		t.Fatal("taken")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != conffile.MaxListed+1 || lines[0] != `wide.yaml: k0000000 (line 2): unknown key "k0000000"` || lines[len(lines)-1] != "… and 299980 more problems" {
		t.Fatalf("%d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
}

// TestReadDirRefusesStrangeFiles: a *.yaml that is a named pipe or a link
// to a device is an error naming it, at once — never a read that blocks or
// never ends; so is a file over conffile.MaxSize. A Kubernetes ConfigMap's
// links (name.yaml → ..data/name.yaml → ..2026_12_05/name.yaml) are read.
// Each case has a folder of its own, and runs only while those before it
// held: a reader that waits on a pipe would read /dev/zero until memory
// runs out.
func TestReadDirRefusesStrangeFiles(t *testing.T) {
	folder := func(t *testing.T) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tc := range []struct {
		name, want string
		make       func(path string) error
	}{
		{"pipe.yaml", "not a regular file (a named pipe)", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
		{"zero.yaml", "not a regular file (a character device)", func(p string) error { return os.Symlink("/dev/zero", p) }},
		{"big.yaml", "larger than 10 MiB", func(p string) error {
			return os.WriteFile(p, append([]byte("domain: big\n"), make([]byte, conffile.MaxSize)...), 0o644)
		}},
	} {
		if t.Failed() {
			t.Fatalf("%s not tried: the cases before it failed", tc.name)
		}
		t.Run(tc.name, func(t *testing.T) {
			dir := folder(t)
			path := filepath.Join(dir, tc.name)
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			// Without the fix the reader waits in open(2) for a writer;
			// release it when the test ends.
			t.Cleanup(func() { unblockPipe(path) })
			done := make(chan error, 1)
			go func() { _, err := envoyconf.ReadDir(dir); done <- err }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "failed to read "+path+": "+tc.want) {
					t.Fatalf("%v, want it to say %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("still reading the folder after 10 s")
			}
		})
	}
	t.Run("configmap", func(t *testing.T) {
		dir := t.TempDir()
		ts := filepath.Join(dir, "..2026_12_05")
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ts, "shop.yaml"), []byte("domain: shop\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("..2026_12_05", filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("..data/shop.yaml", filepath.Join(dir, "shop.yaml")); err != nil {
			t.Fatal(err)
		}
		files, err := envoyconf.ReadDir(dir)
		if err != nil || len(files) != 1 || string(files[0].Data) != "domain: shop\n" {
			t.Fatalf("%v, %v", files, err)
		}
	})
}

// unblockPipe opens a named pipe for writing without blocking and closes
// it: a reader waiting in open(2) goes on and reads its end.
func unblockPipe(path string) {
	if fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		syscall.Close(fd)
	}
}
