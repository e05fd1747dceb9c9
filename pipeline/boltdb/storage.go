package boltdb

import (
	"context"
	"time"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/pipeline/boltdb/boltkeys"
	"github.com/writerd/writerd/pipeline/boltdb/boltlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

var (
	_ kv.Transactor = (*DB)(nil)
	_ kv.Transactor = (*Pending)(nil)
)

// Storage is the pipeline's storage on bbolt: each transaction hands out
// the key store, the audit log and the domain store D, all bound to it.
// D is whatever bind makes of a transaction (boltstore.Bind for the
// built-in tools), so the stores of a transaction are of one backend by
// construction.
type Storage[D any] struct {
	db   kv.Transactor
	bind func(*kv.Tx) D
}

// NewStorage returns the pipeline's storage on db, whose domain store bind
// makes for each transaction.
func NewStorage[D any](db kv.Transactor, bind func(*kv.Tx) D) *Storage[D] {
	return &Storage[D]{db: db, bind: bind}
}

var _ pipeline.Storage[any] = (*Storage[any])(nil)

// Update runs fn as one write of a group commit; see pipeline.Storage.
func (s *Storage[D]) Update(ctx context.Context, fn func(pipeline.Tx[D]) error) error {
	return s.db.Update(ctx, func(tx *kv.Tx) error { return fn(s.bound(tx)) })
}

// View runs fn in a read-only transaction; see pipeline.Storage.
func (s *Storage[D]) View(ctx context.Context, fn func(pipeline.Tx[D]) error) error {
	return s.db.View(ctx, func(tx *kv.Tx) error { return fn(s.bound(tx)) })
}

func (s *Storage[D]) bound(tx *kv.Tx) *stores[D] {
	return &stores[D]{keys: keys{tx}, audit: boltlog.Bind(tx), domain: s.bind(tx)}
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
