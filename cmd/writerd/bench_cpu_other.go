//go:build !unix

package main

import "time"

// cpuTime is not known here: bench reports no CPU time.
func cpuTime() (time.Duration, bool) { return 0, false }
