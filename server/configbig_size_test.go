//go:build !race

package server_test

import "time"

// TestBigConfigFilesLoad's files: just under the 10 MiB cap. Applying them
// allocates ~95 bytes per byte of the files here (the YAML library's node
// trees alone ~40); bigFileAllocPerByte leaves room for what the test and
// the server allocate meanwhile. A loader that spells out each descriptor's
// path from the root allocated ~1,400.
const (
	bigFileBytes        = 9_500_000
	bigFileAllocPerByte = 250
	bigFileWithin       = 60 * time.Second
)
