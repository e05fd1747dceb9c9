package daemon

import (
	"context"
	"errors"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/pipeline/boltdb"
	"github.com/writerd/writerd/pipeline/boltdb/boltstore"
)

// Store is an open store of the built-in tools, on whichever backend.
type Store = pipeline.Store[handlers.Store]

// StoreConfig says which store a daemon runs on. Today that is the bbolt
// file in Data; the choice of a backend is made here, in open and
// openReadOnly, and nowhere else.
type StoreConfig struct {
	// Data is the data directory of the embedded bbolt store.
	Data string
}

// Name names the store in messages, without its path.
func (c StoreConfig) Name() string { return "<data>/" + boltdb.FileName }

// Errors of OpenReadOnly, whatever the backend.
var (
	// ErrHeld: a running writerd holds the store, which takes one process
	// at a time.
	ErrHeld = errors.New("the store is held by a running writerd process")
	// ErrNoStore: there is no store to read.
	ErrNoStore = errors.New("there is no store")
	// ErrOldStore: the store was written by an earlier writerd, and needs
	// converting by serve before it can be read.
	ErrOldStore = errors.New("the store was written by an earlier writerd")
)

// DamagedError is a store too damaged to open safely. Its text is one
// sentence naming the first problem; Problems lists them all, each a
// phrase.
type DamagedError struct {
	Problems []string
	err      error
}

func (e *DamagedError) Error() string { return e.err.Error() }
func (e *DamagedError) Unwrap() error { return e.err }

// OpenStore opens the store to serve from: created if missing, checked
// before use. If it is held or cannot be reached yet, the Pending answers
// every call UNAVAILABLE and keeps trying in the background, until ctx
// ends or it is closed. Any other failure is returned (a *DamagedError
// for a damaged store).
func OpenStore(ctx context.Context, c StoreConfig) (*Pending, error) {
	return openPending(ctx, func() (Store, error) { return open(c) })
}

// open opens the store read-write, once: a held bbolt file is UNAVAILABLE
// with the guidance for it.
func open(c StoreConfig) (Store, error) {
	s, err := boltdb.OpenStorage(c.Data, boltstore.Domain)
	if errors.Is(err, boltdb.ErrLocked) {
		return nil, pipeline.Wrap(pipeline.Unavailable, err, boltdb.HeldMessage)
	}
	if err != nil {
		return nil, classify(err)
	}
	return s, nil
}

// waitingMessage is the log line of a daemon whose store did not open
// yet, for the error of its last attempt.
func waitingMessage(err error) string {
	if errors.Is(err, boltdb.ErrLocked) {
		return "store in use by another writerd process; answering tool calls UNAVAILABLE until it exits"
	}
	return "store not open yet; answering tool calls UNAVAILABLE until it opens"
}

// OpenReadOnly opens the store for reading only, as writerd check and the
// audit commands do: it creates and changes nothing. A store a daemon
// holds is ErrHeld, at once; a missing one ErrNoStore.
func OpenReadOnly(c StoreConfig) (Store, error) {
	s, err := boltdb.OpenStorageReadOnly(c.Data, boltstore.Domain)
	if err != nil {
		return nil, classify(err)
	}
	return s, nil
}

// classify turns a backend's errors of opening into the daemon's.
func classify(err error) error {
	var damaged *boltdb.DamagedError
	switch {
	case errors.Is(err, boltdb.ErrLocked):
		return ErrHeld
	case errors.Is(err, boltdb.ErrNoDatabase):
		return ErrNoStore
	case errors.Is(err, boltdb.ErrOldLayout):
		return ErrOldStore
	case errors.As(err, &damaged):
		return &DamagedError{Problems: damaged.Problems, err: err}
	}
	return err
}

// warner is a store that found damage it works around when it opened.
type warner interface{ Warnings() []string }

// DiskUsage is the size of a store on disk, where its backend can tell:
// the file, the bytes it uses of it, and those of each part (bbolt: each
// top-level bucket), by name.
type DiskUsage struct {
	File, Used int64
	Parts      map[string]int64
}

// Usage returns the disk usage of s, or false if its backend cannot tell.
func Usage(s Store) (DiskUsage, bool, error) {
	if p, ok := s.(*Pending); ok {
		if s = p.Store(); s == nil {
			return DiskUsage{}, false, errors.New("the store is not open")
		}
	}
	u, ok := s.(interface {
		DiskUsage() (file, used int64, parts map[string]int64, err error)
	})
	if !ok {
		return DiskUsage{}, false, nil
	}
	var d DiskUsage
	var err error
	d.File, d.Used, d.Parts, err = u.DiskUsage()
	return d, true, err
}

// Warnings returns the damage s found and works around when it opened,
// each a phrase without a path (bbolt: one bad meta page).
func Warnings(s Store) []string {
	if w, ok := s.(warner); ok {
		return w.Warnings()
	}
	return nil
}
