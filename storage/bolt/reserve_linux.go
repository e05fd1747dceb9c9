package bolt

import (
	"errors"
	"os"
	"syscall"
)

// fallocKeepSize is FALLOC_FL_KEEP_SIZE: allocate without changing the
// file's size.
const fallocKeepSize = 0x1

// reserve has the file system allocate n bytes of f from off, keeping
// the file's size (fallocate); where the file system cannot (EOPNOTSUPP),
// it writes zeros there instead.
func reserve(f *os.File, off, n int64) error {
	var err error
	sc, cerr := f.SyscallConn()
	if cerr != nil {
		return cerr
	}
	if cerr := sc.Control(func(fd uintptr) {
		for {
			err = syscall.Fallocate(int(fd), fallocKeepSize, off, n)
			if err != syscall.EINTR {
				return
			}
		}
	}); cerr != nil {
		return cerr
	}
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return writeZeros(f, off, n)
	}
	return err
}
