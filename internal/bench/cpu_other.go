//go:build !unix

package bench

import "time"

// cpuTime is not known here: bench reports no CPU time.
func cpuTime() (time.Duration, bool) { return 0, false }
