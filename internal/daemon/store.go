package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/postgres"
)

// Store is an open store of the built-in tools, on whichever backend.
type Store = pipeline.Store[handlers.Store]

// StoreConfig says which store a daemon runs on: a PostgreSQL database
// if URL is set, else the embedded bbolt file in Data. The choice of a
// backend is made here, in open and OpenReadOnly, and nowhere else.
type StoreConfig struct {
	// Data is the data directory of the embedded bbolt store.
	Data string
	// URL is a PostgreSQL connection URL or keyword/value string; it may
	// hold a password, so it is never shown.
	URL string
	// Password is the PostgreSQL password, if not the URL's, PGPASSWORD's
	// or .pgpass's.
	Password string
	// Database, if set, is the PostgreSQL database, over the URL's.
	Database string
	// Origin is the audit log's origin, the signing key's name: a
	// PostgreSQL store records the first it is opened with, and refuses
	// another (its replicas must share one key).
	Origin string
}

// Postgres reports whether the store is a PostgreSQL database.
func (c StoreConfig) Postgres() bool { return c.URL != "" }

// Exclusive reports whether one process at a time holds the store (the
// bbolt file's lock): then its log's key is found by the origin it
// records, in the key directory or beside the data, and a reader lets
// go of it between polls so that a daemon can open it. A store that
// replicas share is never held by one, and keeps its key apart from it
// (--audit-key). Code outside the assembly asks this, never which
// backend it is.
func (c StoreConfig) Exclusive() bool { return !c.Postgres() }

// Backend names the store's backend, for the configuration's log line.
func (c StoreConfig) Backend() string {
	if c.Postgres() {
		return "postgres"
	}
	return "bbolt"
}

// Name names the store in messages, without its path or its URL.
func (c StoreConfig) Name() string {
	if c.Postgres() {
		db, err := postgres.ParseURL(c.URL)
		if c.Database != "" {
			db = c.Database
		}
		if err != nil || db == "" {
			return "the PostgreSQL database"
		}
		return "the PostgreSQL database " + db
	}
	return "<data>/" + bolt.FileName
}

// Absent says, for an error, that the store holds nothing to read
// (ErrNoStore), and that nothing was created.
func (c StoreConfig) Absent() string {
	if c.Postgres() {
		return c.Name() + " does not exist or holds no writerd schema (nothing was created); writerd serve --store creates the schema in an existing database"
	}
	return c.Name() + " does not exist (nothing was created); --data names a writerd data directory"
}

func (c StoreConfig) pgdb(readOnly bool) postgres.Config {
	return postgres.Config{URL: c.URL, Password: c.Password, Database: c.Database, ReadOnly: readOnly}
}

// ScratchDatabase makes a new database on the PostgreSQL server c names,
// for a run of its own (writerd bench), and returns its store's config
// and a function that drops it.
func ScratchDatabase(ctx context.Context, c StoreConfig) (StoreConfig, func() error, error) {
	pc, drop, err := postgres.Scratch(ctx, c.pgdb(false))
	if err != nil {
		return c, nil, err
	}
	c.Database = pc.Database
	return c, drop, nil
}

// CheckURL refuses a --store that is no PostgreSQL connection string,
// without repeating it.
func CheckURL(url string) error {
	_, err := postgres.ParseURL(url)
	return err
}

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
	return openPending(ctx, nil, func() (Store, error) { return open(ctx, c) })
}

// open opens the store read-write, once: a held bbolt file, or a
// PostgreSQL server that does not answer, is UNAVAILABLE with the
// guidance for it.
func open(ctx context.Context, c StoreConfig) (Store, error) {
	if c.Postgres() {
		return openPostgres(ctx, c, false)
	}
	s, err := bolt.OpenStorage(c.Data, boltstore.Domain)
	if errors.Is(err, bolt.ErrLocked) {
		return nil, pipeline.Wrap(pipeline.Unavailable, err, bolt.HeldMessage)
	}
	if err != nil {
		return nil, classify(err)
	}
	return s, nil
}

// waitingMessage is the log line of a daemon whose store did not open
// yet, for the error of its last attempt.
func waitingMessage(err error) string {
	switch {
	case errors.Is(err, bolt.ErrLocked):
		return "store in use by another writerd process; answering tool calls UNAVAILABLE until it exits"
	case pipeline.ErrorCode(err) == pipeline.Unavailable:
		return "store cannot be reached; answering tool calls UNAVAILABLE until it can"
	}
	return "store not open yet; answering tool calls UNAVAILABLE until it opens"
}

// OpenReadOnly opens the store for reading only, as writerd check and the
// audit commands do: it creates and changes nothing. A store a daemon
// holds is ErrHeld, at once; a missing one ErrNoStore.
func OpenReadOnly(c StoreConfig) (Store, error) {
	if c.Postgres() {
		return openPostgres(context.Background(), c, true)
	}
	s, err := bolt.OpenStorageReadOnly(c.Data, boltstore.Domain)
	if err != nil {
		return nil, classify(err)
	}
	return s, nil
}

// UnreachableError is OpenReadOnly's error for a server that does not
// answer: a reader that polls (audit tail --follow) tries again.
type UnreachableError struct{ err error }

func (e *UnreachableError) Error() string { return e.err.Error() }
func (e *UnreachableError) Unwrap() error { return e.err }

// RefusedError is a store that refuses the daemon, for a reason that
// does not pass on its own: a PostgreSQL server that refuses its password
// or its role, or has no database of the name given. Its text is one
// sentence saying what to check. serve and check refuse to start on it; a
// daemon already running that meets it (a password rotated) keeps trying
// (Pending, and the store's own connections), logging it once per change
// of cause.
type RefusedError struct{ err error }

func (e *RefusedError) Error() string { return e.err.Error() }
func (e *RefusedError) Unwrap() error { return e.err }

// refusal returns the sentence of a store's refusal of the daemon in err
// (a *RefusedError, or a backend's of a store already open), or "".
func refusal(err error) string {
	var refused *RefusedError
	var pg *postgres.RefusedError
	switch {
	case errors.As(err, &refused):
		return refused.Error()
	case errors.As(err, &pg):
		return pg.Error()
	}
	return ""
}

// ErrOtherOrigin: the store's audit log was signed with another key than
// the daemon was given.
var ErrOtherOrigin = errors.New("the audit signing key is not the one the store's log is signed with: give every replica the same --audit-key")

// openPostgres opens a PostgreSQL store and, but read-only, records the
// log's origin, refusing a key of another.
func openPostgres(ctx context.Context, c StoreConfig, readOnly bool) (Store, error) {
	s, err := postgres.Open(ctx, c.pgdb(readOnly))
	if err != nil {
		if errors.Is(err, postgres.ErrNoDatabase) && !readOnly {
			return nil, &RefusedError{errors.New(c.Name() + " does not exist: create it first, owned by the role writerd connects as (CREATE DATABASE … OWNER …); writerd creates its schema in it")}
		}
		if errors.As(err, new(*postgres.RefusedError)) {
			return nil, &RefusedError{err}
		}
		if readOnly && pipeline.ErrorCode(err) == pipeline.Unavailable {
			return nil, &UnreachableError{fmt.Errorf("%s cannot be reached: %w", c.Name(), errors.Unwrap(err))}
		}
		return nil, classify(err)
	}
	if c.Origin != "" && !readOnly {
		have, err := s.ClaimOrigin(ctx, c.Origin)
		if err != nil {
			s.Close()
			return nil, err
		}
		if have != c.Origin {
			s.Close()
			return nil, ErrOtherOrigin
		}
	}
	return s, nil
}

// classify turns a backend's errors of opening into the daemon's.
func classify(err error) error {
	var damaged *bolt.DamagedError
	switch {
	case errors.Is(err, postgres.ErrOldSchema):
		return ErrOldStore
	case errors.Is(err, postgres.ErrNoSchema), errors.Is(err, postgres.ErrNoDatabase):
		return ErrNoStore
	case errors.Is(err, bolt.ErrLocked):
		return ErrHeld
	case errors.Is(err, bolt.ErrNoDatabase):
		return ErrNoStore
	case errors.Is(err, bolt.ErrOldLayout):
		return ErrOldStore
	case errors.As(err, &damaged):
		return &DamagedError{Problems: damaged.Problems, err: err}
	}
	return err
}

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
	u, ok := s.(pipeline.DiskUser)
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
	if w, ok := s.(pipeline.Warner); ok {
		return w.Warnings()
	}
	return nil
}
