package envoyconf

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ratescope/ratescope/server/conffile"
)

// ReadDir reads every *.yaml file of dir, in name order. Names starting
// with a dot are skipped: editors' and Kubernetes' own files (a ConfigMap
// keeps its files under ..data and links them into dir). Each is read as
// conffile.Read reads a file: a *.yaml that is not a regular file (a named
// pipe, a device, a socket) or is larger than conffile.MaxSize is an error
// naming it, never a read that blocks or does not end.
func ReadDir(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("failed to read the envoy config dir: %w", err)
	}
	var files []File
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".yaml") || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) || err == nil && fi.IsDir():
			continue // a dangling link or a folder named *.yaml
		case err != nil:
			return nil, fmt.Errorf("failed to read %s: %w", path, err)
		}
		data, err := conffile.Read(path)
		if err != nil {
			return nil, fmt.Errorf("failed to read %s: %w", path, err)
		}
		files = append(files, File{Name: path, Data: data})
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

// Digest identifies files' names and contents: equal digests, equal files.
func Digest(files []File) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		for _, part := range [][]byte{[]byte(f.Name), f.Data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write(part)
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:12])
}
