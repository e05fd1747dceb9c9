//go:build !unix

package auth

import (
	"errors"
	"io/fs"
	"os"
	"time"
)

// checkFile refuses anything but a regular file. File modes do not say who
// may read or write a file here; the operator must restrict it with the
// system's own access lists.
func checkFile(fi fs.FileInfo) (warning string, err error) {
	if !fi.Mode().IsRegular() {
		return "", errors.New("the tokens file is not a regular file")
	}
	return "", nil
}

func keepOwner(*os.File, fs.FileInfo) error { return nil }

const lockWait = 10 * time.Second

// lock creates the lock file exclusively, waiting up to lockWait, and
// removes it to unlock. A lock file left by a crash must be removed by hand.
func lock(lockPath string) (unlock func(), err error) {
	deadline := time.Now().Add(lockWait)
	for {
		f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			f.Close()
			return func() { os.Remove(lockPath) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fileError("lock cannot be taken", err)
		}
		if time.Now().After(deadline) {
			return nil, ErrBusy
		}
		time.Sleep(10 * time.Millisecond)
	}
}
