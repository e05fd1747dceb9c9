// Package kv is the bbolt transaction writerd's stores write through: a
// *bbolt.Tx with savepoints.
//
// Group commit runs many writes in one bbolt transaction, one fsync for
// all, but each write's outcome must stay its own: a handler that fails or
// panics rolls back its own changes only, and never re-runs or disturbs
// the others. bbolt has no savepoints, so this package keeps an undo log:
// every Put, Delete and NextSequence through a Bucket records what it
// replaced, and RollbackTo restores it, newest first. Reads go to bbolt
// directly.
//
// The stores of the bbolt backend (boltkeys, boltlog, boltstore) take a
// *Tx, the backend's one transaction type: a write through a store is
// always one the undo log sees. Reads wrap a plain *bbolt.Tx (Wrap).
//
// Caveats: only writes through Bucket are undone; a store must never
// write through the *bbolt.Tx that Bolt returns. Buckets are not created
// or deleted inside a savepoint.
package kv

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// Tx is a bbolt transaction with savepoints.
type Tx struct {
	tx      *bolt.Tx
	undo    []change
	buckets map[string]*Bucket
}

// change is what one write replaced.
type change struct {
	bucket  *bolt.Bucket
	key     []byte // nil: the bucket's sequence
	old     []byte // nil: the key was absent
	oldSeq  uint64
	present bool
}

// Wrap returns a Tx over tx.
func Wrap(tx *bolt.Tx) *Tx { return &Tx{tx: tx, buckets: map[string]*Bucket{}} }

// Bolt returns the underlying transaction, for reads only (a consistency
// check, bucket statistics).
func (t *Tx) Bolt() *bolt.Tx { return t.tx }

// Writable reports whether the transaction may write.
func (t *Tx) Writable() bool { return t.tx.Writable() }

// Bucket returns the top-level bucket of this name, or nil.
func (t *Tx) Bucket(name []byte) *Bucket {
	if b, ok := t.buckets[string(name)]; ok {
		return b
	}
	bb := t.tx.Bucket(name)
	if bb == nil {
		return nil
	}
	b := &Bucket{b: bb, tx: t}
	t.buckets[string(name)] = b
	return b
}

// Savepoint marks the transaction's state, for RollbackTo.
type Savepoint int

// Savepoint returns the current state's mark.
func (t *Tx) Savepoint() Savepoint { return Savepoint(len(t.undo)) }

// RollbackTo undoes every write made since sp, newest first. An error
// leaves the transaction in no known state: the caller must roll it all
// back.
func (t *Tx) RollbackTo(sp Savepoint) error {
	for i := len(t.undo) - 1; i >= int(sp); i-- {
		c := t.undo[i]
		var err error
		switch {
		case c.key == nil:
			err = c.bucket.SetSequence(c.oldSeq)
		case c.present:
			err = c.bucket.Put(c.key, c.old)
		default:
			err = c.bucket.Delete(c.key)
		}
		if err != nil {
			return err
		}
	}
	t.undo = t.undo[:sp]
	return nil
}

// Bucket is a bbolt bucket whose writes the transaction can undo.
type Bucket struct {
	b  *bolt.Bucket
	tx *Tx
}

// Get returns the value of key, or nil; valid only during the transaction.
func (b *Bucket) Get(key []byte) []byte { return b.b.Get(key) }

// Put sets key to value, recording what it replaces.
func (b *Bucket) Put(key, value []byte) error {
	b.record(key)
	return b.b.Put(key, value)
}

// Delete removes key, recording what it held.
func (b *Bucket) Delete(key []byte) error {
	b.record(key)
	return b.b.Delete(key)
}

func (b *Bucket) record(key []byte) {
	old := b.b.Get(key)
	c := change{bucket: b.b, key: bytes.Clone(key), present: old != nil}
	if old != nil {
		c.old = bytes.Clone(old)
	}
	b.tx.undo = append(b.tx.undo, c)
}

// NextSequence returns the bucket's next sequence number, recording the
// one it replaces.
func (b *Bucket) NextSequence() (uint64, error) {
	b.tx.undo = append(b.tx.undo, change{bucket: b.b, oldSeq: b.b.Sequence()})
	return b.b.NextSequence()
}

// Sequence returns the bucket's current sequence number.
func (b *Bucket) Sequence() uint64 { return b.b.Sequence() }

// Cursor returns a cursor over the bucket, for reads.
func (b *Bucket) Cursor() *bolt.Cursor { return b.b.Cursor() }

// ForEach calls fn with each key and value, in key order.
func (b *Bucket) ForEach(fn func(k, v []byte) error) error { return b.b.ForEach(fn) }

// Stats returns the bucket's page statistics.
func (b *Bucket) Stats() bolt.BucketStats { return b.b.Stats() }

// SetFillPercent sets how full bbolt fills a page before it splits it:
// 1 for a bucket that only appends.
func (b *Bucket) SetFillPercent(f float64) { b.b.FillPercent = f }
