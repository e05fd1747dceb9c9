//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/writerd/writerd/storage/bolt"
)

// faultFS is a FUSE loopback file system over a directory of the test's
// own, served by the test process, that fails on purpose one call on the
// database file (bolt.FileName) with EIO: the Nth fsync or write from
// when it is armed. The calls after it succeed again, as on a disk whose
// error passed: the case where a later fsync succeeds over pages the
// kernel dropped.
//
// Only other processes may touch the mount (the writerd under test, its
// check and audit commands): the process that serves a FUSE file system
// deadlocks on its own mount once it maps a file of it, as bbolt does. So
// the test reads the store through the backing directory, once the mount
// is gone (unmount).
type faultFS struct {
	dir     string // the mount point
	backing string // what it serves
	server  *fuse.Server

	mu      sync.Mutex
	op      string // "fsync" or "write": what fails; "" when not armed
	nth     int    // the calls of op to go until the one that fails
	failed  bool   // the fault has been met
	after   int    // writes and fsyncs of the file since the fault
	unmount sync.Once
}

// mustMountFaultFS mounts a faultFS, or skips the test with one line where
// FUSE cannot be had. The test's end unmounts it.
func mustMountFaultFS(t testing.TB) *faultFS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a FUSE file system (DirectMountStrict, no fusermount) needs root; CI runs as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse, so no FUSE file system to inject I/O errors with")
	}
	f := &faultFS{dir: filepath.Join(t.TempDir(), "mnt"), backing: filepath.Join(t.TempDir(), "backing")}
	for _, d := range []string{f.dir, f.backing} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.backing, &st); err != nil {
		t.Fatal(err)
	}
	root := &fs.LoopbackRoot{Path: f.backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &faultNode{LoopbackNode: fs.LoopbackNode{RootData: r}, fs: f}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	timeout := time.Duration(0) // no caching of names or attributes: every call reaches the server
	server, err := fs.Mount(f.dir, root.RootNode, &fs.Options{
		MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: "writerd-faultfs", Name: "faultfs"},
		EntryTimeout: &timeout, AttrTimeout: &timeout, NegativeTimeout: &timeout,
	})
	if err != nil {
		t.Skipf("cannot mount a FUSE file system: %v", err)
	}
	f.server = server
	t.Cleanup(func() { f.mustUnmount(t) })
	return f
}

// arm makes the nth call of op ("fsync" or "write") on the database file
// from now fail with EIO, once.
func (f *faultFS) arm(op string, nth int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op, f.nth, f.failed, f.after = op, nth, false, 0
}

// state returns whether the fault was met, and how many writes and
// fsyncs of the database file came after it.
func (f *faultFS) state() (failed bool, after int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed, f.after
}

// call counts a call of op on the database file and reports whether it
// is the one that fails.
func (f *faultFS) call(op string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed {
		f.after++
		return false
	}
	if f.op == op {
		if f.nth--; f.nth == 0 {
			f.failed, f.op = true, ""
			return true
		}
	}
	return false
}

// mustUnmount ends the mount; every process that used it must have
// exited. The store is then read through the backing directory.
func (f *faultFS) mustUnmount(t testing.TB) {
	t.Helper()
	f.unmount.Do(func() {
		var err error
		for range 50 {
			if err = f.server.Unmount(); err == nil {
				f.server.Wait()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("unmount the FUSE file system: %v", err)
	})
}

// faultNode is a loopback node whose open files are faultFiles.
type faultNode struct {
	fs.LoopbackNode
	fs *faultFS
}

var (
	_ fs.NodeOpener  = (*faultNode)(nil)
	_ fs.NodeCreater = (*faultNode)(nil)
)

func (n *faultNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return n.wrap(filepath.Base(n.Path(nil)), fh), fl, errno
}

func (n *faultNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, n.wrap(name, fh), fl, errno
}

func (n *faultNode) wrap(name string, fh fs.FileHandle) fs.FileHandle {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh
	}
	return &faultFile{LoopbackFile: lf, fs: n.fs, db: name == bolt.FileName}
}

// faultFile is a loopback file whose writes and fsyncs may fail, and
// which the kernel may not bypass (no passthrough), so that every write
// and fsync reaches it.
type faultFile struct {
	*fs.LoopbackFile
	fs *faultFS
	db bool // the database file
}

func (f *faultFile) PassthroughFd() (int, bool) { return 0, false }

func (f *faultFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if f.db && f.fs.call("write") {
		return 0, syscall.EIO
	}
	return f.LoopbackFile.Write(ctx, data, off)
}

func (f *faultFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if f.db && f.fs.call("fsync") {
		return syscall.EIO
	}
	return f.LoopbackFile.Fsync(ctx, flags)
}
