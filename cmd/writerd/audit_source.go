package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/pathless"
	"github.com/writerd/writerd/pipeline"
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
var errHeld = errors.New(daemon.StoreConfig{}.Name() + " is held by a running writerd process, so it cannot be read from the data directory; read the log through that daemon with --server URL and a token with the audit scope")

// localSource reads a data directory that no daemon holds, read-only,
// through the audit protocol's Local: the same answers a daemon's audit
// API gives.
type localSource struct {
	auditapi.Local
	store   daemon.StoreConfig
	keyFile string       // --audit-key; "" finds the key by the log's origin (bbolt)
	s       daemon.Store // nil while idle
}

// openLocal opens the store read-only; it creates nothing. A store a
// daemon holds is errHeld, at once.
func openLocal(store daemon.StoreConfig, keyFile string) (*localSource, error) {
	l := &localSource{store: store, keyFile: keyFile}
	l.Local = auditapi.Local{Log: l}
	return l, l.open()
}

func (l *localSource) open() error {
	if l.s != nil {
		return nil
	}
	s, err := daemon.OpenReadOnly(l.store)
	var damaged *daemon.DamagedError
	switch {
	case errors.Is(err, daemon.ErrHeld):
		return errHeld
	case errors.Is(err, daemon.ErrNoStore):
		return errors.New("there is no audit log to read: " + l.store.Absent())
	case errors.Is(err, daemon.ErrOldStore):
		return errors.New(l.store.Name() + " holds no audit log with a tree: it was written by a writerd before the tree; start writerd serve on it once to add it")
	case errors.As(err, &damaged):
		return fmt.Errorf("%w; run writerd check --data DIR to list the damage", err)
	case err != nil:
		return fmt.Errorf("the store cannot be opened: %w", err)
	}
	l.s = s
	return nil
}

// idle closes the store until the next read, so that a daemon may start
// on it meanwhile (tail --follow between polls).
func (l *localSource) idle() {
	if l.s != nil {
		l.s.Close()
		l.s = nil
	}
}

func (l *localSource) Close() error {
	l.idle()
	return nil
}

// View implements auditlog.Viewer for Local, opening the store if idle.
func (l *localSource) View(ctx context.Context, fn func(auditlog.Reader) error) error {
	if err := l.open(); err != nil {
		return err
	}
	return pipeline.AuditStorage(l.s).View(ctx, fn)
}

func (l *localSource) VerifierKey(ctx context.Context) (string, string, error) {
	keyFile := l.keyFile
	switch {
	case keyFile == "" && !l.store.Exclusive():
		return "", "", errors.New("a PostgreSQL store keeps no key beside it, so the checkpoints cannot be checked: give the verifier key with --key, or the daemons' key file with --audit-key")
	case keyFile == "":
		// The daemon's: the key of the log's origin in the key directory,
		// or an earlier writerd's in the data directory.
		if err := l.open(); err != nil {
			return "", "", err
		}
		origin, err := daemon.StoreOrigin(ctx, l.s)
		if err != nil {
			return "", "", fmt.Errorf("the store cannot be read: %w", err)
		}
		if keyFile, _, err = daemon.LocateKey(l.store.Data, "", origin); err != nil {
			return "", "", fmt.Errorf("%w, so the checkpoints cannot be checked: give the verifier key with --key, or the daemon's key file with --audit-key", err)
		}
	}
	b, err := os.ReadFile(keyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", errors.New("the daemon's key file is not there (--audit-key), so the checkpoints cannot be checked: give the verifier key with --key")
	}
	if err != nil {
		return "", "", fmt.Errorf("cannot read the daemon's key file: %w", pathless.Error(err))
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
