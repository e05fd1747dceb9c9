package bolt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltkeys"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// Online backups. A copy of the live file is not a backup: a commit may
// land while it is read, and the copy then holds half of one. bbolt's
// Tx.WriteTo writes the database as one read transaction sees it, a
// consistent state holding every commit before it began, while writes go
// on: it writes fresh meta pages for that state, then the data pages up
// to its high-water mark, which no later commit overwrites while the
// transaction is open (bbolt reuses a freed page only once no reader may
// still see it).
//
// Caveats. The transaction is held for as long as the copy takes, so the
// pages writes free meanwhile are not reused until it ends (the file may
// grow), and a commit that must grow the file past bbolt's mapping waits
// for it to end (bbolt remaps only without readers). So whoever streams
// a backup should cut off a reader that stalls (the HTTP route does), and
// Close ends a backup at its next write rather than wait for it. The copy
// is as large as the pages in use, free ones included (the file up to its
// high-water mark): it is not compacted.

// errClosing ends a backup whose database began to close: Close waits
// for every read transaction, the backup's too.
var errClosing = pipeline.Wrap(pipeline.Unavailable, errors.New("boltdb: the database is closing"),
	"The store is closing; take the backup again once it serves.")

// Backup writes a consistent copy of the whole database, as of one read
// transaction begun when it is called: every write committed before the
// call is in it, none that commits after. It first calls begin with the
// copy's size in bytes, which is exactly what it then writes to the
// writer begin returns; an error from begin ends the backup with nothing
// written, and is returned as it is. A poisoned database (refuse.go) is
// backed up no more than it is read. The copy ends early with an error
// if ctx ends, if the writer fails, or if the database begins to close
// (UNAVAILABLE). It returns the bytes written. Its own errors name no
// path; begin's and the writer's come back unchanged.
func (d *DB) Backup(ctx context.Context, begin func(size int64) (io.Writer, error)) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := d.Poisoned(); err != nil {
		return 0, err // as View: its mapping may show pages that never reached the disk
	}
	var closing <-chan struct{}
	if d.commits != nil {
		closing = d.commits.group.Stopping()
	}
	var n int64
	var began bool
	var out error // begin's, or the writer's, returned unchanged
	err := d.db.View(func(tx *bolt.Tx) error {
		w, err := begin(tx.Size())
		if err != nil {
			out = err
			return err
		}
		began = true
		cw := &backupWriter{ctx: ctx, closing: closing, w: w}
		n, err = tx.WriteTo(cw)
		if cw.err != nil {
			out = cw.err
			return cw.err
		}
		return err
	})
	switch {
	case err == nil:
		return n, nil
	case out != nil && errors.Is(err, out):
		return n, out
	case !began:
		return n, classify(redact(d.dir, err))
	}
	return n, redact(d.dir, fmt.Errorf("boltdb: backup: %w", err))
}

// backupWriter passes a backup's bytes on, and ends it once ctx ends or
// the database begins to close. Its error is kept: bbolt's WriteTo
// flattens the error of a meta page's write into text.
type backupWriter struct {
	ctx     context.Context
	closing <-chan struct{}
	w       io.Writer
	err     error
}

func (b *backupWriter) Write(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	select {
	case <-b.closing:
		b.err = errClosing
		return 0, b.err
	default:
	}
	if err := b.ctx.Err(); err != nil {
		b.err = err
		return 0, err
	}
	n, err := b.w.Write(p)
	if err != nil {
		b.err = err
	}
	return n, err
}

// Backup writes a consistent copy of the database (DB.Backup).
func (s *Storage[D]) Backup(ctx context.Context, begin func(size int64) (io.Writer, error)) (int64, error) {
	return s.db.Backup(ctx, begin)
}

// BackupFile is what CheckBackup found in a backup that passed.
type BackupFile struct {
	Size   int64  // bytes
	Events uint64 // audit events
}

// CheckBackup checks that the file at path, a backup just received, is a
// whole database of writerd's current layout before anyone relies on it:
// the checks Open makes before bbolt maps a file (its size against its
// meta pages, their checksums, every page of its tree), then, mapped
// read-only, bbolt's own consistency check and the presence of writerd's
// stores. It changes nothing. A file that fails is a *DamagedError, whose
// Problems say what is wrong, each a phrase without a path.
func CheckBackup(path string) (BackupFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return BackupFile{}, err
	}
	if fi.Size() == 0 {
		return BackupFile{}, &DamagedError{Problems: []string{"the file is empty: it holds no database"}}
	}
	o := &opener{readOnly: true}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, OpenFile: o.openFile, Timeout: 50 * time.Millisecond})
	var damaged *DamagedError
	switch {
	case errors.As(err, &damaged):
		return BackupFile{}, damaged
	case errors.Is(err, ErrLocked):
		return BackupFile{}, ErrLocked
	case err != nil:
		return BackupFile{}, &DamagedError{Problems: []string{"bbolt cannot open it"}}
	}
	defer db.Close()
	info := BackupFile{Size: fi.Size()}
	var problems []string
	err = db.View(func(tx *bolt.Tx) error {
		n := 0
		for range tx.Check() {
			n++
		}
		switch {
		case n == 1:
			problems = append(problems, "bbolt's consistency check finds 1 problem in its pages")
		case n > 1:
			problems = append(problems, fmt.Sprintf("bbolt's consistency check finds %d problems in its pages", n))
		}
		if !boltkeys.Current(tx) || !boltlog.Current(tx) {
			problems = append(problems, "it holds no writerd store of this version")
			return nil
		}
		var err error
		info.Events, err = boltlog.Bind(kv.Wrap(tx)).Size()
		return err
	})
	if err != nil {
		problems = append(problems, "its audit log cannot be read")
	}
	if len(problems) > 0 {
		return info, &DamagedError{Problems: problems}
	}
	return info, nil
}

// Held reports whether a writerd process holds the database file at path
// (its exclusive lock): false if there is no file there. It is how a
// backup refuses to be written over a live database.
func Held(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = lock(f, false)
	if errors.Is(err, ErrLocked) {
		return true, nil
	}
	return false, err
}

// Hold takes the exclusive lock a writerd process takes on the database
// file at path, without waiting (ErrLocked if one holds it), so that no
// daemon opens the file until release is called: a restore holds the
// file it replaces. With no file at path it holds nothing.
func Hold(path string) (release func(), err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := lock(f, true); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
