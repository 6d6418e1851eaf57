//go:build race

package server_test

import "time"

// TestBigConfigFilesLoad under -race, which runs code 5-10 times slower:
// files of a tenth of the size, the same bound on memory.
const (
	bigFileBytes        = 950_000
	bigFileAllocPerByte = 250
	bigFileWithin       = 120 * time.Second
)
