//go:build unix

package server

import (
	"fmt"
	"syscall"
)

// raiseOpenFiles lifts the process's open-files soft limit to its hard limit
// (every connection and viewer holds a descriptor) and returns both.
func raiseOpenFiles() (soft, hard uint64, err error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0, fmt.Errorf("failed to read the open-files limit: %w", err)
	}
	if l.Cur < l.Max {
		raised := l
		raised.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return uint64(l.Cur), uint64(l.Max), fmt.Errorf("failed to raise the open-files limit to %d: %w", l.Max, err)
		}
		l = raised
	}
	return uint64(l.Cur), uint64(l.Max), nil
}
