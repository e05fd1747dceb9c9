//go:build !linux

package bolt

import "os"

// reserve has the file system allocate n bytes of f from off: it writes
// zeros there.
func reserve(f *os.File, off, n int64) error { return writeZeros(f, off, n) }
