package bolt

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltkeys"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// PageSize is the page size of a new database; a file keeps the size it
// was made with. It weighs two costs. Every write inserts into the two
// indexes keyed by what agents send (keys, names) at random places, so a
// commit rewrites a whole page per write there: the smaller the page, the
// less each write costs. But the ordered buckets (audit events, key
// records) grow at their end, and bbolt splits a full page leaving three
// elements for the next one, so a page holding few values is left partly
// empty when writes commit one at a time. Measured with writerd bench on
// a fresh store (docs/DESIGN.md section 10), 8 KiB pages write 19% faster
// at 64 agents, but with one write a commit the audit log takes 1.40
// times its events' canonical bytes, past the 1.3 writerd keeps it
// within; 16 KiB pages keep it at 1.27.
const PageSize = 16 << 10

// FileName is the database file inside a data directory.
const FileName = "writerd.db"

// ErrLocked is returned by Open and OpenReadOnly when another process holds
// the database.
var ErrLocked = errors.New("boltdb: the database is in use by another process")

// HeldMessage is what a call is told while another process holds the
// database: a fixed sentence, without a path. A daemon that waits for the
// file answers with it (UNAVAILABLE, retry same_key).
const HeldMessage = "The store is in use by another writerd process. Send the call again with the same key in a little while; if this persists, give each writerd its own --data directory, or send the calls to the writerd that holds the store (one HTTP daemon serves many clients)."

// ErrNoDatabase is returned by OpenReadOnly when the data directory holds
// no database.
var ErrNoDatabase = errors.New("boltdb: no database in the data directory")

// DB is an open bbolt database. Its writes are group-committed (group.go).
type DB struct {
	db       *bolt.DB
	file     *os.File // bbolt's
	dir      string
	warnings []string
	commits  *committer // nil when read-only
}

// Open opens (creating if needed) the database in dir and creates the
// buckets of the pipeline's stores, plus those of any init given (the
// domain store's).
//
// It takes the file's lock without waiting (ErrLocked if another process
// holds it), then checks the file against its own meta pages and reads
// every page of its tree before bbolt maps it, and runs bbolt's own
// consistency check once it has: a damaged file is refused with a
// *DamagedError instead of faulting or spreading the damage later. Damage
// bbolt works around is kept as a warning (see Warnings). Errors name the
// file as <data>/writerd.db, never by its path.
func Open(dir string, inits ...func(*kv.Tx) error) (*DB, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, redact(dir, fmt.Errorf("boltdb: create data directory: %w", err))
	}
	d, err := open(dir, false)
	if err != nil {
		return nil, err
	}
	inits = append([]func(*kv.Tx) error{boltkeys.Store{}.Init, boltlog.Init, initMeta}, inits...)
	err = d.db.Update(func(tx *bolt.Tx) error {
		for _, init := range inits {
			if err := init(kv.Wrap(tx)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		d.db.Close()
		return nil, redact(dir, fmt.Errorf("boltdb: create buckets: %w", err))
	}
	d.commits = newCommitter(d.db, d.file, dir)
	return d, nil
}

// ErrOldLayout is returned by OpenReadOnly for a database an earlier
// writerd wrote, whose stores Open would convert first.
var ErrOldLayout = errors.New("boltdb: the database was written by an earlier writerd; Open converts it")

// OpenReadOnly opens the database in dir for reading, as writerd check
// and the audit commands do. It creates and converts nothing: a missing
// directory or file is ErrNoDatabase, stores of an earlier layout
// ErrOldLayout. It checks the file as Open does and shares its lock with
// other readers; ErrLocked if a daemon holds it.
func OpenReadOnly(dir string) (*DB, error) {
	d, err := open(dir, true)
	if err != nil {
		return nil, err
	}
	current := false
	err = d.db.View(func(tx *bolt.Tx) error {
		current = boltkeys.Current(tx) && boltlog.Current(tx)
		return nil
	})
	if err != nil {
		// A read that failed says nothing of the layout: it is answered as
		// the failure it is, without the file's path, not as ErrOldLayout.
		d.Close()
		return nil, classify(redact(dir, fmt.Errorf("boltdb: read the stores' layout: %w", err)))
	}
	if !current {
		d.Close()
		return nil, ErrOldLayout
	}
	return d, nil
}

func open(dir string, readOnly bool) (*DB, error) {
	o := &opener{readOnly: readOnly}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		ReadOnly: readOnly,
		OpenFile: o.openFile,
		PageSize: PageSize,
		// The lock is taken without waiting by openFile; bbolt's own
		// flock on the same file then succeeds at once.
		Timeout: 50 * time.Millisecond,
	})
	var damaged *DamagedError
	switch {
	case err == nil:
		if !readOnly {
			if err := consistent(db); err != nil {
				db.Close()
				return nil, err
			}
		}
		return &DB{db: db, file: o.file, dir: dir, warnings: o.warnings}, nil
	case errors.As(err, &damaged):
		return nil, damaged
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, ErrLocked
	case readOnly && errors.Is(err, fs.ErrNotExist):
		return nil, ErrNoDatabase
	}
	return nil, redact(dir, fmt.Errorf("boltdb: open: %w", err))
}

// consistent runs bbolt's own consistency check (every page reachable
// once or free, keys in order), which is safe once checkFile passed: a
// file whose tree is out of order would be made worse by every write. On
// a database of 100k writes (303 MiB) it takes about 60 ms, as long as
// checkFile (BenchmarkStartup). Its messages may hold keys, which are
// values callers sent, so the error only counts them; writerd check
// lists them.
func consistent(db *bolt.DB) error {
	n := 0
	db.View(func(tx *bolt.Tx) error {
		for range tx.Check() {
			n++
		}
		return nil
	})
	if n == 0 {
		return nil
	}
	what := "1 problem"
	if n > 1 {
		what = fmt.Sprintf("%d problems", n)
	}
	return &DamagedError{Problems: []string{"bbolt's consistency check finds " + what + " in its pages"}}
}

// opener opens the file for bbolt: it locks it, then checks it.
type opener struct {
	readOnly bool
	warnings []string
	file     *os.File // the file opened, once checked
}

func (o *opener) openFile(path string, flag int, mode os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag, mode)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		return nil, err
	}
	if err := lock(f, !o.readOnly); err != nil {
		return fail(err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if fi.Size() == 0 && o.readOnly {
		return fail(&DamagedError{Problems: []string{"the file is empty: it holds no database"}})
	}
	r := checkFile(f, fi.Size())
	if err := r.damaged(); err != nil {
		return fail(err)
	}
	o.warnings = r.warnings
	o.file = f
	return f, nil
}

// Warnings returns the damage that Open found and bbolt works around (one
// bad meta page), each a phrase without a path, for the log.
func (d *DB) Warnings() []string { return d.warnings }

// Update runs fn as one write of a group commit; see pipeline.Storage and
// group.go. fn's error comes back unchanged, its changes rolled back; a
// panic in fn is an error too. fn runs on the committer's goroutine. A
// commit that fails is UNAVAILABLE: the disk is full, or the store is
// poisoned and takes no write until it is opened again (refuse.go).
func (d *DB) Update(ctx context.Context, fn func(*kv.Tx) error) error {
	if d.commits == nil {
		return classify(bolterrors.ErrDatabaseReadOnly)
	}
	return d.commits.write(ctx, fn)
}

// Ready returns nil when the database takes writes: open, its committer
// running, the disk not full and no commit failed to reach it; else the
// UNAVAILABLE its writes are answered (see refuse.go: while the disk is
// full, Ready is a probe that needs new space, and it is ready again
// once the probe finds it, even if no write came meanwhile).
func (d *DB) Ready(ctx context.Context) error {
	if d.commits == nil {
		return classify(bolterrors.ErrDatabaseReadOnly)
	}
	return d.commits.ready(ctx)
}

// Poisoned returns the error every call is answered once a commit failed
// to reach the disk (its chain holds ErrPoisoned), or nil.
func (d *DB) Poisoned() error {
	if d.commits == nil {
		return nil
	}
	return d.commits.refused()
}

// SetLogger has the database log to l: the one line of a commit that
// poisons it (refuse.go). Without it, nothing is logged.
func (d *DB) SetLogger(l *slog.Logger) {
	if d.commits != nil {
		d.commits.mu.Lock()
		d.commits.log = l
		d.commits.mu.Unlock()
	}
}

// ObserveCommits has f told of every commit that succeeds: its duration,
// fsync included, and how many writes it committed.
func (d *DB) ObserveCommits(f func(d time.Duration, writes int)) {
	if d.commits != nil {
		d.commits.observer.Set(f)
	}
}

// View runs fn in a read-only transaction; see pipeline.Storage. A
// poisoned database serves no read (refuse.go): its mapping may show
// pages that never reached the disk.
func (d *DB) View(_ context.Context, fn func(*kv.Tx) error) error {
	if err := d.Poisoned(); err != nil {
		return err
	}
	var fnErr error
	err := d.db.View(func(tx *bolt.Tx) error {
		fnErr = fn(kv.Wrap(tx))
		return fnErr
	})
	if err != nil && err == fnErr {
		return err
	}
	return classify(redact(d.dir, err))
}

// Close waits for the commit in flight, answers the writes still queued
// UNAVAILABLE, and closes the database; later transactions answer
// UNAVAILABLE.
func (d *DB) Close() error {
	if d.commits != nil {
		d.commits.stop()
	}
	return redact(d.dir, d.db.Close())
}

// Bolt returns the underlying database, for tools that read it directly.
func (d *DB) Bolt() *bolt.DB { return d.db }

// classify marks the storage failures a client may retry later as
// UNAVAILABLE: a closed store, a full disk. Other errors pass unchanged.
// A commit's own failure is classified by commitFailed instead.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bolterrors.ErrDatabaseNotOpen):
		return pipeline.Wrap(pipeline.Unavailable, err, "The store is closed; send the call again with the same key later.")
	case errors.Is(err, syscall.ENOSPC):
		return pipeline.Wrap(pipeline.Unavailable, err, FullMessage)
	}
	return err
}
