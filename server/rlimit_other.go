//go:build !unix

package server

import "errors"

// raiseOpenFiles has nothing to raise where there is no RLIMIT_NOFILE.
func raiseOpenFiles() (soft, hard uint64, err error) {
	return 0, 0, errors.New("no open-files limit on this system")
}
