package boltdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

// FileName is the database file inside a data directory.
const FileName = "writerd.db"

// ErrLocked is returned by Open when another process holds the database.
var ErrLocked = errors.New("boltdb: the database is in use by another process")

// DB is an open bbolt database.
type DB struct {
	db *bolt.DB
}

// Open opens (creating if needed) the database in dir and creates the
// buckets of the pipeline's stores, plus those of any init given (the
// domain store's).
func Open(dir string, inits ...func(tx any) error) (*DB, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("boltdb: create data directory: %w", err)
	}
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("boltdb: open: %w", err)
	}
	inits = append([]func(any) error{idempotency.Bolt{}.Init, auditlog.Bolt{}.Init}, inits...)
	err = db.Update(func(tx *bolt.Tx) error {
		for _, init := range inits {
			if err := init(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("boltdb: create buckets: %w", err)
	}
	return &DB{db: db}, nil
}

// Update runs fn in one read-write transaction; see pipeline.Storage.
func (d *DB) Update(_ context.Context, fn func(pipeline.Tx) error) error {
	return classify(d.db.Update(func(tx *bolt.Tx) error { return fn(tx) }))
}

// View runs fn in a read-only transaction; see pipeline.Storage.
func (d *DB) View(_ context.Context, fn func(pipeline.Tx) error) error {
	return classify(d.db.View(func(tx *bolt.Tx) error { return fn(tx) }))
}

// Close closes the database; later transactions answer UNAVAILABLE.
func (d *DB) Close() error { return d.db.Close() }

// Bolt returns the underlying database, for tools that read it directly.
func (d *DB) Bolt() *bolt.DB { return d.db }

// classify marks the storage failures a client may retry later as
// UNAVAILABLE: a closed store, a full disk. Other errors pass unchanged.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bolterrors.ErrDatabaseNotOpen):
		return pipeline.Wrap(pipeline.Unavailable, err, "The store is closed; send the call again with the same key later.")
	case errors.Is(err, syscall.ENOSPC):
		return pipeline.Wrap(pipeline.Unavailable, err, "The store is full; send the call again with the same key later.")
	}
	return err
}
