package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// File is the temporary file that will replace path on Commit. Write to
// it as to any *os.File (Chmod and Chown included).
type File struct {
	*os.File
	path   string
	closed bool // synced and closed
	done   bool // renamed, or abandoned
}

// New creates the temporary file beside path, with mode perm (whatever
// the umask).
func New(path string, perm fs.FileMode) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: path, Err: unwrap(err)}
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, &fs.PathError{Op: "create", Path: path, Err: unwrap(err)}
	}
	return &File{File: f, path: path}, nil
}

// Close syncs the temporary file and closes it, without renaming it, so
// that a caller can check the whole file before it replaces anything.
// Commit closes it if Close was not called.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	if err := f.File.Sync(); err != nil {
		f.File.Close()
		return &fs.PathError{Op: "sync", Path: f.path, Err: unwrap(err)}
	}
	if err := f.File.Close(); err != nil {
		return &fs.PathError{Op: "close", Path: f.path, Err: unwrap(err)}
	}
	return nil
}

// Rename closes the file (Close) and renames it over path, without
// syncing the directory: for a caller that replaces many files of one
// directory and syncs it once (SyncDir). The temporary file is removed
// if it fails.
func (f *File) Rename() error {
	if f.done {
		return errors.New("atomicfile: already committed or abandoned")
	}
	if err := f.Close(); err != nil {
		f.Abort()
		return err
	}
	if err := os.Rename(f.Name(), f.path); err != nil {
		f.Abort()
		return &fs.PathError{Op: "rename", Path: f.path, Err: unwrap(err)}
	}
	f.done = true
	return nil
}

// Commit renames the file over path (Rename) and syncs the directory.
// After an error of Op "syncdir" the new file is in place, but its name
// may not survive a crash.
func (f *File) Commit() error {
	if err := f.Rename(); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(f.path))
}

// Abort closes and removes the temporary file; path is untouched. It
// does nothing after Commit, so that it can be deferred.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	if !f.closed {
		f.closed = true
		f.File.Close()
	}
	os.Remove(f.Name())
}

// WriteFile replaces path with data, of mode perm: New, Write, Commit.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	f, err := New(path, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return &fs.PathError{Op: "write", Path: path, Err: unwrap(err)}
	}
	return f.Commit()
}

// SyncDir syncs a directory, so that the names renamed into it survive a
// crash.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // a directory cannot be opened for syncing there
	}
	d, err := os.Open(dir)
	if err != nil {
		return &fs.PathError{Op: "syncdir", Path: dir, Err: unwrap(err)}
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "syncdir", Path: dir, Err: unwrap(err)}
	}
	return nil
}

// unwrap drops the temporary file's name from a file error: the caller's
// error names the target.
func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
