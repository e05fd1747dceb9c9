package daemon

import (
	"context"
	"errors"
	"io"
	"path/filepath"

	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
)

// NoBackupMessage answers a backup asked of a store writerd does not
// back up itself: a PostgreSQL database, which has its own tools. The
// backup route's client knows it (httpapi.FetchBackup).
const NoBackupMessage = httpapi.NoBackupMessage

// Backup writes a consistent copy of the store s, as of the moment it is
// called, to the writer begin returns, which it calls first with the
// copy's size (see pipeline.Backuper): on bbolt, the database file a daemon can
// be started on. A store that is not open yet is UNAVAILABLE; one that
// cannot be backed up this way (PostgreSQL) is NOT_FOUND with
// NoBackupMessage. Nothing is written on either.
func Backup(ctx context.Context, s Store, begin func(size int64) (io.Writer, error)) (int64, error) {
	if p, ok := s.(*Pending); ok {
		var err error
		if s, err = p.current(); err != nil {
			return 0, err
		}
	}
	b, ok := s.(pipeline.Backuper)
	if !ok {
		return 0, pipeline.Errorf(pipeline.NotFound, NoBackupMessage)
	}
	return b.Backup(ctx, begin)
}

// Backup writes a consistent copy of the daemon's store (Backup), for
// the HTTP edge's backup route (httpapi.Config.Backup).
func (d *Daemon) Backup(ctx context.Context, begin func(size int64) (io.Writer, error)) (int64, error) {
	if d.cfg.Store.Postgres() {
		return 0, pipeline.Errorf(pipeline.NotFound, NoBackupMessage)
	}
	return Backup(ctx, d.Store, begin)
}

// BackupFile is what CheckBackup found in a backup that passed: its size
// in bytes and the audit events it holds.
type BackupFile struct {
	Size   int64
	Events uint64
}

// CheckBackup checks that the file at path, a backup just received, is a
// whole database of writerd's current layout (bolt.CheckBackup): the
// file checks a store gets before it is mapped, then bbolt's consistency
// check. A file that fails is a *DamagedError.
func CheckBackup(path string) (BackupFile, error) {
	info, err := bolt.CheckBackup(path)
	if err != nil {
		return BackupFile{}, classify(err)
	}
	return BackupFile{Size: info.Size, Events: info.Events}, nil
}

// HeldFile reports whether a running writerd holds the database file at
// path, so that a backup is never renamed over a live database; false if
// there is no file there.
func HeldFile(path string) (bool, error) { return bolt.Held(path) }

// StoreFile is the file of the bbolt store in the data directory dir.
func StoreFile(dir string) string { return filepath.Join(dir, bolt.FileName) }

// HoldFile takes the lock a running writerd takes on the database file
// at path (bolt.Hold): ErrHeld if one holds it; nothing is held if there
// is no file there.
func HoldFile(path string) (release func(), err error) {
	release, err = bolt.Hold(path)
	if errors.Is(err, bolt.ErrLocked) {
		return nil, ErrHeld
	}
	return release, err
}
