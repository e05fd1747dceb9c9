//go:build unix

package bolt

import (
	"errors"
	"os"
	"syscall"
)

// lock takes the advisory lock that bbolt takes, on the same open file,
// without waiting: exclusive to write, shared to read. bbolt's own flock on
// the file then succeeds at once (flock is per open file), so the file is
// checked and opened under one lock, and no writer can change it between.
func lock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH | syscall.LOCK_NB
	if exclusive {
		how = syscall.LOCK_EX | syscall.LOCK_NB
	}
	err := syscall.Flock(int(f.Fd()), how)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
