// Package conffile reads configuration files — ratescope's own --config
// file and envoyproxy/ratelimit's files in --envoy-config-dir — within
// bounds, so that no file can wedge or exhaust the process that reads it: a
// file must be a regular file (a named pipe would block the reader, a device
// such as /dev/zero never ends), at most MaxSize bytes, and its YAML aliases
// may not expand it beyond what envoyproxy/ratelimit's YAML library accepts
// (Decode).
package conffile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxSize is the largest config file read, in bytes (10 MiB): far above
// any real config (a Kubernetes ConfigMap holds 1 MiB in all), and small
// enough that parsing the largest one costs a bounded few hundred MB of
// memory for a moment.
const MaxSize = 10 << 20

// ErrNotRegular is returned for a path that is not a regular file (or a
// symbolic link to one): a named pipe, a device, a socket or a folder.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned for a file larger than MaxSize.
var ErrTooLarge = fmt.Errorf("larger than %d MiB, the most a config file may hold", MaxSize>>20)

// Read reads the file at path, following symbolic links (a Kubernetes
// ConfigMap links each file to ..data/<file>). A path that is not a
// regular file is refused before it is opened, and checked again once it
// is open — without blocking, so a named pipe swapped in meanwhile cannot
// hold the reader; a file is never read past MaxSize bytes, so one that
// grows as it is read cannot hold it either. Its errors say what is wrong
// without the path, which the caller names: "not a regular file (a named
// pipe)".
func Read(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, reason(err)
	}
	if err := check(fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, reason(err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, reason(err)
	}
	if err := check(fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, reason(err)
	}
	if len(b) > MaxSize {
		return nil, ErrTooLarge
	}
	return b, nil
}

// reason is err without the path an os error names.
func reason(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// check refuses what is not a regular file, naming what it is, and a
// regular file already larger than MaxSize.
func check(fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))
	}
	if fi.Size() > MaxSize {
		return fmt.Errorf("%w (%d bytes)", ErrTooLarge, fi.Size())
	}
	return nil
}

// kind names a file mode that is not a regular file's.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}
