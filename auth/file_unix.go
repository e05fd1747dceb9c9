//go:build unix

package auth

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// checkFile decides whether a tokens file can be trusted, from its
// information as the open file reports it (so that it is the file read).
//
// Whoever can change the file can give themselves a token, so a file that
// other users may write, or that belongs to a user other than the one
// writerd runs as (or root), is refused, as sshd refuses such an
// authorized_keys. Root may use a file of any owner: it can change any
// file anyway, and an administrator running writerd token as root on the
// daemon user's file is the usual case. A file that other users may read is
// loaded with a warning: it holds hashes, which let no one in, but its
// names and scopes are the operator's business.
func checkFile(fi fs.FileInfo) (warning string, err error) {
	if !fi.Mode().IsRegular() {
		return "", errors.New("the tokens file is not a regular file")
	}
	perm := fi.Mode().Perm()
	if perm&0o022 != 0 {
		return "", fmt.Errorf("the tokens file can be written by other users (mode %04o), who could add tokens of their own; run chmod 600 on it", perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if uid, me := int(st.Uid), os.Geteuid(); uid != me && uid != 0 && me != 0 {
			return "", fmt.Errorf("the tokens file belongs to another user (uid %d), who could add tokens of their own; it must belong to the user writerd runs as, or to root", uid)
		}
	}
	if perm&0o044 != 0 {
		return fmt.Sprintf("the tokens file can be read by other users (mode %04o); it holds no token, only hashes, but run chmod 600 on it to keep its names and scopes private", perm), nil
	}
	return "", nil
}

// keepOwner gives the new file f the owner and group of the file it
// replaces, so that an edit made as root leaves the file readable by the
// user the daemon runs as. It fails rather than leave a file the daemon
// could no longer read.
func keepOwner(f *os.File, old fs.FileInfo) error {
	st, ok := old.Sys().(*syscall.Stat_t)
	if !ok || (int(st.Uid) == os.Geteuid() && int(st.Gid) == os.Getegid()) {
		return nil
	}
	if err := f.Chown(int(st.Uid), int(st.Gid)); err != nil {
		return fileError("cannot keep its owner and group", err)
	}
	return nil
}

// lockWait is how long an edit waits for another to finish.
const lockWait = 10 * time.Second

// lock takes an exclusive flock on the lock file beside the tokens file,
// waiting up to lockWait. The lock is on a file of its own, never renamed:
// a lock on the tokens file itself would be on the inode that the edit's
// rename replaces, and a second editor opening the new file would not wait
// for it. The lock file stays in place: removing it would race an editor
// that has just opened it.
func lock(lockPath string) (unlock func(), err error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fileError("lock cannot be opened", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fileError("lock cannot be taken", err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, ErrBusy
		}
		time.Sleep(10 * time.Millisecond)
	}
}
