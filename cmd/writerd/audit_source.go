package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/auditapi"
	"github.com/writerd/writerd/pipeline/boltdb"
	"github.com/writerd/writerd/pipeline/boltdb/boltlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// source is where the audit commands read the log: a data directory that
// no daemon holds (localSource), or a running daemon's audit API
// (remoteSource). Both answer the calls of auditapi.Source alike, so that
// a command prints the same whichever it reads.
type source interface {
	auditapi.Source
	// VerifierKey returns the log's own verifier key and where it came
	// from, for a note.
	VerifierKey(ctx context.Context) (key, from string, err error)
	Close() error
}

// errHeld is the error of a data directory a daemon holds.
var errHeld = errors.New("<data>/" + boltdb.FileName + " is held by a running writerd process, so it cannot be read from the data directory; read the log through that daemon with --server URL and a token with the audit scope")

// localSource reads a data directory that no daemon holds, read-only,
// through the audit protocol's Local: the same answers a daemon's audit
// API gives.
type localSource struct {
	auditapi.Local
	dir     string
	keyFile string
	db      *boltdb.DB // nil while idle
}

// openLocal opens the database in dir read-only; it creates nothing. A
// database a daemon holds is errHeld, at once.
func openLocal(dir, keyFile string) (*localSource, error) {
	l := &localSource{dir: dir, keyFile: keyFile}
	l.Local = auditapi.Local{Log: l}
	return l, l.open()
}

func (l *localSource) open() error {
	if l.db != nil {
		return nil
	}
	db, err := boltdb.OpenReadOnly(l.dir)
	switch {
	case errors.Is(err, boltdb.ErrLocked):
		return errHeld
	case errors.Is(err, boltdb.ErrNoDatabase):
		return errors.New("there is no audit log to read: <data>/" + boltdb.FileName + " does not exist (nothing was created); --data names a writerd data directory")
	case errors.Is(err, boltdb.ErrDamaged):
		return fmt.Errorf("%w; run writerd check --data DIR to list the damage", err)
	case err != nil:
		return fmt.Errorf("the store cannot be opened: %w", err)
	}
	err = db.Bolt().View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("audit_events")) == nil || tx.Bucket([]byte("audit_checkpoints")) == nil {
			return errors.New("<data>/" + boltdb.FileName + " holds no audit log with a tree: it was written by a writerd before the tree; start writerd serve on it once to add it")
		}
		return nil
	})
	if err != nil {
		db.Close()
		return err
	}
	l.db = db
	return nil
}

// idle closes the database until the next read, so that a daemon may
// start on it meanwhile (tail --follow between polls).
func (l *localSource) idle() {
	if l.db != nil {
		l.db.Close()
		l.db = nil
	}
}

func (l *localSource) Close() error {
	l.idle()
	return nil
}

// View implements auditlog.Viewer for Local, opening the database if
// idle.
func (l *localSource) View(_ context.Context, fn func(auditlog.Reader) error) error {
	if err := l.open(); err != nil {
		return err
	}
	return l.db.Bolt().View(func(tx *bolt.Tx) error { return fn(boltlog.Bind(kv.Wrap(tx))) })
}

func (l *localSource) VerifierKey(context.Context) (string, string, error) {
	b, err := os.ReadFile(l.keyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", errors.New("the daemon's key file is not there (<data>/" + auditKeyFile + ", or --audit-key), so the checkpoints cannot be checked: give the verifier key with --key")
	}
	if err != nil {
		return "", "", fmt.Errorf("cannot read the daemon's key file: %w", pathless(err))
	}
	key, err := verifierLine(b)
	if err != nil {
		return "", "", fmt.Errorf("the daemon's key file %w", err)
	}
	return key, "the daemon's key file", nil
}

// remoteSource reads a running daemon's audit API.
type remoteSource struct{ *auditapi.Client }

func newRemote(base *url.URL, token string) *remoteSource {
	return &remoteSource{auditapi.NewClient(base, token)}
}

func (r *remoteSource) VerifierKey(ctx context.Context) (string, string, error) {
	key, err := r.Client.VerifierKey(ctx)
	return key, "the daemon", err
}
