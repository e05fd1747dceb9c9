//go:build !unix

package bolt

import "os"

// lock does nothing where flock is missing: bbolt takes its own lock right
// after the file is checked, and reports a held file as a timeout.
func lock(*os.File, bool) error { return nil }
