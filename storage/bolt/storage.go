package bolt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltkeys"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// Domain is a domain store on bbolt: what a Storage needs to create its
// buckets, bind it to each transaction and check it.
type Domain[D any] struct {
	// Init creates the domain's buckets, in Open's transaction.
	Init func(*kv.Tx) error
	// Bind returns the domain store bound to a transaction.
	Bind func(*kv.Tx) D
	// Check runs the domain's physical checks (see Check); nil for none.
	Check func(*kv.Tx) error
}

// Storage is the bbolt backend's store: the pipeline's Storage[D] on a DB,
// whose every transaction hands out the key store, the audit log and the
// domain store D, all bound to it, and everything else a daemon needs of
// an open store (pipeline.Store). D is whatever the domain's Bind makes of
// a transaction (boltstore.Bind for the built-in tools), so the stores of
// a transaction are of one backend by construction.
type Storage[D any] struct {
	db       *DB
	domain   Domain[D]
	replicas replicas // replicas.go
}

var _ pipeline.Store[any] = (*Storage[any])(nil)

// NewStorage returns the pipeline's storage on db, whose domain store bind
// makes for each transaction, with no physical checks of the domain's own.
func NewStorage[D any](db *DB, bind func(*kv.Tx) D) *Storage[D] {
	return &Storage[D]{db: db, domain: Domain[D]{Bind: bind}}
}

// OpenStorage opens (creating if needed) the database in dir with the
// domain's buckets, as Open does, and returns its Storage.
func OpenStorage[D any](dir string, d Domain[D]) (*Storage[D], error) {
	var inits []func(*kv.Tx) error
	if d.Init != nil {
		inits = append(inits, d.Init)
	}
	db, err := Open(dir, inits...)
	if err != nil {
		return nil, err
	}
	return &Storage[D]{db: db, domain: d}, nil
}

// OpenStorageReadOnly opens the database in dir for reading, as
// OpenReadOnly does, and returns its Storage, whose Update fails.
func OpenStorageReadOnly[D any](dir string, d Domain[D]) (*Storage[D], error) {
	db, err := OpenReadOnly(dir)
	if err != nil {
		return nil, err
	}
	return &Storage[D]{db: db, domain: d}, nil
}

// Update runs fn as one write of a group commit; see pipeline.Storage.
func (s *Storage[D]) Update(ctx context.Context, fn func(pipeline.Tx[D]) error) error {
	return s.db.Update(ctx, func(tx *kv.Tx) error { return fn(s.bound(tx)) })
}

// View runs fn in a read-only transaction; see pipeline.Storage.
func (s *Storage[D]) View(ctx context.Context, fn func(pipeline.Tx[D]) error) error {
	return s.db.View(ctx, func(tx *kv.Tx) error { return fn(s.bound(tx)) })
}

// Ready returns nil when the store takes writes (DB.Ready): open, its
// committer running, the disk not full and no commit failed to reach it.
func (s *Storage[D]) Ready(ctx context.Context) error { return s.db.Ready(ctx) }

// Lead reports whether this process may sign checkpoints of the store's
// audit log: it holds the file, so always, unless the store is poisoned
// (DB.Poisoned). Then no checkpoint is signed over a log whose last
// events may not be on the disk, and the checkpointer stands aside
// without a log line a poll.
func (s *Storage[D]) Lead(context.Context) bool { return s.db.Poisoned() == nil }

// Exclusive reports true: the file's lock keeps every other process out
// (pipeline.Exclusive).
func (s *Storage[D]) Exclusive() bool { return true }

// SetLogger has the store log to l (DB.SetLogger).
func (s *Storage[D]) SetLogger(l *slog.Logger) { s.db.SetLogger(l) }

// ObserveCommits has f told of every commit (DB.ObserveCommits).
func (s *Storage[D]) ObserveCommits(f func(d time.Duration, writes int)) { s.db.ObserveCommits(f) }

// Check runs the physical checks: the database's (Check) and the domain's.
// It reports what it read as the database's pages.
func (s *Storage[D]) Check(context.Context) (string, error) {
	var pages int64
	var problems error
	err := s.db.db.View(func(btx *bolt.Tx) error {
		pages = btx.Size() / int64(s.db.db.Info().PageSize)
		problems = Check(btx)
		if s.domain.Check != nil {
			problems = errors.Join(problems, s.domain.Check(kv.Wrap(btx)))
		}
		return nil
	})
	if err != nil {
		return "", classify(redact(s.db.dir, err))
	}
	what := fmt.Sprintf("%d pages", pages)
	if pages == 1 {
		what = "1 page"
	}
	return what, problems
}

// Warnings returns the damage Open found and bbolt works around
// (DB.Warnings).
func (s *Storage[D]) Warnings() []string { return s.db.Warnings() }

// DiskUsage returns the size of the file, the bytes of the pages bbolt
// uses (its high-water mark, free pages included), and the bytes of the
// pages each top-level bucket holds, by name.
func (s *Storage[D]) DiskUsage() (file, used int64, parts map[string]int64, err error) {
	fi, err := os.Stat(filepath.Join(s.db.dir, FileName))
	if err != nil {
		return 0, 0, nil, redact(s.db.dir, err)
	}
	parts = map[string]int64{}
	err = s.db.db.View(func(tx *bolt.Tx) error {
		used = tx.Size()
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			st := b.Stats()
			parts[string(name)] = int64(st.BranchAlloc + st.LeafAlloc)
			return nil
		})
	})
	return fi.Size(), used, parts, err
}

// Close closes the database (DB.Close).
func (s *Storage[D]) Close() error { return s.db.Close() }

func (s *Storage[D]) bound(tx *kv.Tx) *stores[D] {
	return &stores[D]{keys: keys{tx}, audit: boltlog.Bind(tx), domain: s.domain.Bind(tx)}
}

// stores is one transaction's stores.
type stores[D any] struct {
	keys   keys
	audit  boltlog.Log
	domain D
}

func (s *stores[D]) Keys() pipeline.Keys   { return s.keys }
func (s *stores[D]) Audit() pipeline.Audit { return s.audit }
func (s *stores[D]) Domain() D             { return s.domain }

// keys is the idempotency record store bound to a transaction.
type keys struct{ tx *kv.Tx }

func (k keys) Get(principal, key string) (*idempotency.Record, error) {
	return boltkeys.Store{}.Get(k.tx, principal, key)
}

// Claim is Get: the file is one process's (its lock), whose key locks
// already keep a key's writes apart.
func (k keys) Claim(principal, key string, _ time.Duration) (*idempotency.Record, error) {
	return k.Get(principal, key)
}
func (k keys) Put(r *idempotency.Record) error { return boltkeys.Store{}.Put(k.tx, r) }
func (k keys) ForEach(fn func(*idempotency.Record) error) error {
	return boltkeys.Store{}.ForEach(k.tx, fn)
}
func (k keys) HasExpired(now time.Time) (bool, error) {
	return boltkeys.Store{}.HasExpired(k.tx, now)
}
func (k keys) Collect(now time.Time, limit int) (int, bool, error) {
	return boltkeys.Store{}.Collect(k.tx, now, limit)
}
func (k keys) Delete(principal, key string) error {
	return boltkeys.Store{}.Delete(k.tx, principal, key)
}
func (k keys) Unsettled(fn func(*idempotency.Record) error) error {
	return boltkeys.Store{}.Unsettled(k.tx, fn)
}
func (k keys) Secret() ([]byte, error) { return secret(k.tx) }
