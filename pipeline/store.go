package pipeline

import (
	"context"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
)

// Storage runs transactions on one backend. D is the backend's domain
// store, the one the handlers read and write through (handlers.Store for
// the built-in tools): a Pipeline[D] takes a Storage[D], so a backend whose
// domain store is not the tools' is a compile error, not a failed
// assertion at run time.
type Storage[D any] interface {
	// Update runs fn as one write and commits it durably (fsync) if fn
	// returns nil, possibly in one transaction with other writes (group
	// commit): fn sees every write committed or run before it, in arrival
	// order. If fn returns an error or panics, everything fn wrote is
	// rolled back, others' writes are not, and Update returns fn's error
	// (a panic as an error). fn may run on another goroutine and must not
	// call Update itself. Update returns UNAVAILABLE when the store is
	// closed, and the commit's error if the commit fails. If ctx carries
	// a store deadline (StoreDeadline), Update returns StoreWaitExpired
	// once it passes and fn has not returned its answer: fn then never
	// runs if it has not begun, and a write that ran may still commit.
	Update(ctx context.Context, fn func(Tx[D]) error) error
	// View runs fn in a read-only transaction. It returns UNAVAILABLE when
	// the store is closed.
	View(ctx context.Context, fn func(Tx[D]) error) error
}

// ClaimLookup is implemented by a Storage each of whose transactions costs
// a round trip to a server (PostgreSQL), for which stage 5's read
// transaction is a round trip that the write's claim repeats. For it the
// pipeline looks a key up only inside the write's transaction where stage
// 6 does not need the answer first: a write to the store that is not an
// unconfirmed delete. The claim answers a live record as the lookup would
// (the replay, byte for byte, or the conflict), and its transaction
// writes nothing; a replay then takes a turn in a batch instead of a read
// transaction. A write to an upstream, whose pending record the lookup
// waits for, and a destructive call without "confirm", which must replay
// rather than preview, are looked up first on every store.
type ClaimLookup interface {
	ClaimLookup() bool
}

// Store is one open store of a backend: the Storage the pipeline's calls
// run on, and what a daemon needs of it around them. Each backend is one
// package that opens its stores as Stores; package storetest is the
// conformance suite that proves one keeps the promises of Storage, Keys
// and Audit (docs/DESIGN.md, "Adding a backend").
type Store[D any] interface {
	Storage[D]
	// Ready returns nil when the store is open and takes writes, and
	// otherwise why not (for /readyz and its log).
	Ready(ctx context.Context) error
	// ObserveCommits has f told of every commit from then on: its
	// duration, the writes run in it and its sync included, and how many
	// writes (Update calls) it committed. Commits come one at a time.
	ObserveCommits(f func(d time.Duration, writes int))
	// Check runs the backend's own physical checks (a file's pages, an
	// index against what it indexes) and returns every problem found,
	// joined (errors.Join), and what it read, as a phrase for a summary
	// ("1204 pages"). The promises every backend keeps are checked
	// through the interfaces, by Check and the domain's own.
	Check(ctx context.Context) (checked string, problems error)
	// Close waits for the commit in flight, answers the writes still
	// queued UNAVAILABLE, and closes the store; later transactions answer
	// UNAVAILABLE.
	Close() error
}

// Tx is one transaction of a Storage: a unit of work handing out the key
// store, the audit log and the domain store, each bound to it, so that a
// write's change, its idempotency record and its audit event commit
// together or not at all. A Tx is valid only inside the function it was
// given to.
type Tx[D any] interface {
	Keys() Keys
	Audit() Audit
	Domain() D
}

// Keys stores idempotency records (docs/DESIGN.md section 5), in one
// transaction.
//
// The claim rule. A call's key is looked up twice: in a read transaction
// before anything runs (Get), and again inside the write transaction that
// runs the handler (Claim), which must make sure that the key executes at
// most once. In one process the pipeline's key locks already serialise
// the calls of a key, so a backend that one process holds (bbolt locks
// its file) has nothing more to do: its Claim is Get. A backend that
// several processes share must also hold off the other processes: while
// another process's transaction has claimed the key, Claim waits for it
// to end, at most wait, and then returns the record that transaction
// committed (nil if it committed none, and the key is this call's now);
// still held after the wait, it returns idempotency.ErrInUse, which the
// pipeline answers IDEMPOTENCY_KEY_IN_USE (retry same_key) without
// recording anything. The claim holds until the transaction ends.
type Keys interface {
	// Get returns the record of principal's key, expired or not, or nil.
	Get(principal, key string) (*idempotency.Record, error)
	// Claim is Get inside a write transaction, claiming the key for it as
	// the claim rule above says. wait <= 0 is not to wait.
	Claim(principal, key string, wait time.Duration) (*idempotency.Record, error)
	// Put stores a record, replacing an expired one of the same key.
	Put(r *idempotency.Record) error
	// HasExpired reports whether any record has expired at now; it is
	// asked in a read transaction before any collection.
	HasExpired(now time.Time) (bool, error)
	// Collect deletes up to limit expired records, the earliest first,
	// touching no live one, and reports whether expired records remain.
	Collect(now time.Time, limit int) (deleted int, more bool, err error)
	// ForEach calls fn with every record, expired or not, stopping at the
	// first error fn returns: for the checks of Check.
	ForEach(fn func(*idempotency.Record) error) error

	// Writes outside the store (docs/DESIGN.md section 5b).

	// Delete removes principal's record of key, if any: a pending record
	// whose call provably never left writerd. The caller has claimed the
	// key and checked the fence.
	Delete(principal, key string) error
	// Unsettled calls fn with every pending record and every unknown one
	// not yet resolved, oldest CreatedAt first, stopping at the first
	// error fn returns: for takeover, writerd outcome list and the
	// metrics. It reads an index of its own, never every record.
	Unsettled(fn func(*idempotency.Record) error) error
	// Secret returns the store's secret for upstream keys, 32 random
	// bytes made once in the store's life and the same for every replica:
	// in a write transaction it makes and stores it if there is none; in
	// a read transaction it returns nil then.
	Secret() ([]byte, error)
}

// Audit is the audit log (docs/DESIGN.md section 7) in one transaction:
// the pipeline appends each call's event to it; auditors, the audit API
// and the checkpointer read it and store checkpoints through auditlog's
// read seam, which computes everything else (lookups, listing, proofs,
// exports) the same way on every backend.
type Audit interface {
	auditlog.Writer
	// Append assigns the event its id and time, after the last event's
	// (auditlog.Event.Follow), and stores it as part of the transaction:
	// it exists exactly when the transaction commits, so that sequence
	// numbers stay dense however writes fail. Its id is final. Its
	// sequence number is the next after the log's size, set here by a
	// backend that numbers in the write's transaction (bbolt); one that
	// numbers it later, in id order (PostgreSQL's sequencer), leaves it 0.
	Append(e *auditlog.Event) error
}

// AuditStorage returns the audit log's storage on s, for the checkpointer
// and the audit API: their transactions are s's, each handing them the
// transaction's audit log.
func AuditStorage[D any](s Storage[D]) auditlog.Storage { return auditStorage[D]{s} }

type auditStorage[D any] struct{ s Storage[D] }

func (a auditStorage[D]) View(ctx context.Context, fn func(auditlog.Reader) error) error {
	return a.s.View(ctx, func(tx Tx[D]) error { return fn(tx.Audit()) })
}

func (a auditStorage[D]) Update(ctx context.Context, fn func(auditlog.Writer) error) error {
	return a.s.Update(ctx, func(tx Tx[D]) error { return fn(tx.Audit()) })
}
