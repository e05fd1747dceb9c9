package bolt

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// Ensure a failed commit is told apart by its cause, in the shapes bbolt
// returns them: no room for a page it writes (os.File.WriteAt's error) or
// for growing the file (bbolt's text of it) is a full disk, transient;
// the same errno from fdatasync, an EIO anywhere, or a failed sync while
// growing poisons the store.
func TestNoSpace(t *testing.T) {
	path := "/data/writerd.db"
	tests := []struct {
		name string
		err  error
		full bool
	}{
		{"a page's write, ENOSPC", &fs.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}, true},
		{"a page's write, EDQUOT", &fs.PathError{Op: "write", Path: path, Err: syscall.EDQUOT}, true},
		{"growing the file, ENOSPC", fmt.Errorf("file resize error: %s", &fs.PathError{Op: "truncate", Path: path, Err: syscall.ENOSPC}), true},
		{"a page's write, EIO", &fs.PathError{Op: "write", Path: path, Err: syscall.EIO}, false},
		{"fdatasync, ENOSPC", syscall.ENOSPC, false},
		{"fdatasync, EIO", syscall.EIO, false},
		{"growing the file, a failed sync", fmt.Errorf("file sync error: %s", &fs.PathError{Op: "sync", Path: path, Err: syscall.ENOSPC}), false},
		{"growing the file, EIO", fmt.Errorf("file resize error: %s", &fs.PathError{Op: "truncate", Path: path, Err: syscall.EIO}), false},
		{"mapping the file", errors.New("mmap allocate error: cannot allocate memory"), false},
	}
	for _, tt := range tests {
		if got := noSpace(tt.err); got != tt.full {
			t.Errorf("%s (%v): full %v, want %v", tt.name, tt.err, got, tt.full)
		}
	}
}
