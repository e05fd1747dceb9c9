package pipeline

import (
	"context"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
)

// Tx is one storage transaction. Its concrete type belongs to the backend
// (a *kv.Tx, bbolt's with savepoints, for the embedded default): the
// storage, key store, audit log and domain store of one backend agree on
// it, and the pipeline only passes it along. It is an alias so that stores in packages below the pipeline can
// name the same type without importing it.
type Tx = any

// Storage runs transactions. Every write of the pipeline goes through its
// Update, from one place (Pipeline.update).
type Storage interface {
	// Update runs fn as one write and commits it durably (fsync) if fn
	// returns nil, possibly in one transaction with other writes (group
	// commit): fn sees every write committed or run before it, in arrival
	// order. If fn returns an error or panics, everything fn wrote is
	// rolled back, others' writes are not, and Update returns fn's error
	// (a panic as an error). fn may run on another goroutine and must not
	// call Update itself. Update returns UNAVAILABLE when the store is
	// closed, and the commit's error if the commit fails.
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn in a read-only transaction. It returns UNAVAILABLE when
	// the store is closed.
	View(ctx context.Context, fn func(Tx) error) error
}

// Keys stores idempotency records (docs/DESIGN.md section 5).
type Keys interface {
	// Get returns the record of principal's key, expired or not, or nil.
	Get(tx Tx, principal, key string) (*idempotency.Record, error)
	// Put stores a record, replacing an expired one of the same key.
	Put(tx Tx, r *idempotency.Record) error
	// HasExpired reports whether any record has expired at now; it is
	// asked in a read transaction before any collection.
	HasExpired(tx Tx, now time.Time) (bool, error)
	// Collect deletes up to limit expired records, the earliest first,
	// touching no live one, and reports whether expired records remain.
	Collect(tx Tx, now time.Time, limit int) (deleted int, more bool, err error)
}

// Audit appends audit events (docs/DESIGN.md section 7).
type Audit interface {
	// Append assigns the event its sequence number and id and stores it as
	// part of tx.
	Append(tx Tx, e *auditlog.Event) error
}
