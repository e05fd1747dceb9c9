package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/internal/groupcommit"
)

// MaxBatch bounds the writes one transaction commits: each runs behind a
// savepoint, a subtransaction, and PostgreSQL keeps the subtransactions
// of a transaction in a cache of 64 per backend, past which every
// session that looks at the transaction slows down.
const MaxBatch = 60

// The lock timeouts: in a batch nothing waits; a write run alone waits
// for what it needs, within a bound.
const (
	batchLockTimeout = "SET LOCAL lock_timeout = '20ms'"
	aloneLockTimeout = "SET LOCAL lock_timeout = '10s'"
)

// Group commit, as on bbolt (docs/DESIGN.md section 11): the writes that
// arrive while a commit is in flight share the next transaction, each
// behind a savepoint, in arrival order, and are answered once it is
// committed. In PostgreSQL a failed statement aborts its transaction, so
// a write's failure is rolled back to its savepoint and no further; and
// a write that would wait on another transaction (a key or a row another
// replica holds) must neither stall nor abort the rest, so in a batch it
// does not wait: it is rolled back to its savepoint and run again alone,
// in a transaction of its own, which may wait. Postgres groups the WAL
// flushes of concurrent commits itself; commit_delay stays off.

// write is what a unit of the group commit holds: one write. Its
// statements run under no caller's context: one caller giving up must
// not break the transaction it shares with others (a cancelled statement
// closes its connection); the lock timeouts bound every wait instead.
type write struct {
	fn      func(pipeline.Tx[handlers.Store]) error
	stale   bool    // its batch's seal was refused once: it ran again in the next
	outcome outcome // in the batch being committed
}

type unit = groupcommit.Unit[write]

// outcome is what became of a write in its batch's transaction, which
// commit answers it by once the transaction has ended.
type outcome uint8

const (
	unitPending outcome = iota // not reached: the transaction failed before or at it
	unitRan                    // ran: committed with the batch, or failed with it
	unitFailed                 // failed on its own, rolled back to its savepoint
	unitAlone                  // met a lock: runAlone answers it
)

// committer runs the writes of one replica on the shared loop
// (storage/internal/groupcommit), committing each batch in one
// transaction.
type committer struct {
	s     *Store
	group *groupcommit.Committer[write]
}

// newCommitter starts the group commit of s.
func newCommitter(s *Store) *committer {
	c := &committer{s: s}
	c.group = groupcommit.Start(MaxBatch, errClosedStore, c.commit)
	return c
}

var errClosedStore = pipeline.Wrap(pipeline.Unavailable, errClosed, closedMessage)

func (c *committer) write(ctx context.Context, fn func(pipeline.Tx[handlers.Store]) error) error {
	return c.group.Submit(ctx, write{fn: fn})
}

// commit runs a batch in one transaction and answers its writes, but for
// those it returns for the next batch: its seal was refused, the audit
// log cut past its events (errStale), which nothing of the batch
// committed; run again, they get new ids. A write refused so twice runs
// alone. A write that met another lock is rolled back to its savepoint
// and run again alone at once, not after the batch.
func (c *committer) commit(batch []*unit) (again []*unit) {
	start := time.Now()
	ctx := context.Background()
	for _, u := range batch {
		u.Err, u.Write.outcome = nil, unitPending // a write run again's last batch is over
	}
	ran := 0
	err := c.inTx(ctx, false, func(t *tx) error {
		for _, u := range batch {
			if u.Err = u.Gone(); u.Err != nil {
				u.Write.outcome = unitFailed // its caller went away: it never runs
				continue
			}
			m := t.savepoint()
			end := t.within(u)
			u.Err = runUnit(u.Write.fn, t)
			if u.Err == nil {
				u.Err = t.flush("write") // its own statements, not the next write's
			}
			end()
			u.Ran()
			contended := t.contended
			if h := u.Hooks(); !contended && h != nil && h.Contended != nil && h.Contended() {
				contended, u.Err = true, errContended // as check marks a write that met a lock
			}
			if !contended && u.Err == nil {
				u.Write.outcome = unitRan
				ran++
				continue
			}
			if err := t.rollbackTo(m); err != nil {
				return err
			}
			if contended {
				u.Write.outcome = unitAlone
				c.group.Go(func() { c.runAlone(u) })
			} else {
				u.Write.outcome = unitFailed
			}
		}
		return nil
	})
	stale := errors.Is(err, errStale) // the writes that ran go again, below
	switch {
	case err == nil:
		c.s.observer.Observe(time.Since(start), ran)
	case internal(err):
		// Not the pipeline's to see; nothing of the batch was committed.
		err = pipeline.Wrap(pipeline.Unavailable, err, unavailableMessage)
	}
	for _, u := range batch {
		switch u.Write.outcome {
		case unitAlone:
			continue // runAlone answers it
		case unitFailed:
			// Its own failure, rolled back to its savepoint, whatever became
			// of the batch.
		case unitRan:
			if stale && !u.Write.stale {
				u.Write.stale = true
				u.Err = nil
				again = append(again, u)
				continue
			}
			if stale {
				u.Write.outcome = unitAlone
				c.group.Go(func() { c.runAlone(u) })
				continue
			}
			fallthrough
		default:
			if u.Err == nil {
				u.Err = err // committed (nil) or not, with the batch
			}
		}
		if internal(u.Err) {
			// Not a write's answer: nothing of it was committed.
			u.Err = err
		}
		u.Answer()
	}
	return again
}

// internal reports whether err is one of the committer's own signals,
// which no caller may be answered: not yet an error of the pipeline's.
func internal(err error) bool {
	var pe *pipeline.Error
	return (errors.Is(err, errContended) || errors.Is(err, errStale)) && !errors.As(err, &pe)
}

// within bounds the statements of u's write by its caller's wait for the
// store (groupcommit.Unit.Deadline) until the returned func is called: a
// statement still unanswered then, sent to a server gone silent, is
// cancelled, which ends its connection and so the transaction, rather
// than holding the write, and its caller, until TCP gives up. Its caller
// is answered at the deadline whatever the statement does, and the write
// so too (check), whichever of the two answers comes first.
func (t *tx) within(u *unit) func() {
	d, ok := u.Deadline()
	if !ok {
		return func() {}
	}
	return t.until(d)
}

// until bounds t's statements by deadline until the returned func is
// called (within).
func (t *tx) until(deadline time.Time) func() {
	base := t.ctx
	ctx, cancel := context.WithDeadlineCause(base, deadline, pipeline.ErrStoreWait)
	t.ctx = ctx
	return func() {
		cancel()
		t.ctx = base
	}
}

// runAlone runs a write in a transaction of its own, where it may wait.
func (c *committer) runAlone(u *unit) {
	defer u.Answer()
	if err := u.Gone(); err != nil {
		u.Err = err // its caller went away before it ran again
		return
	}
	// Not running while the transaction begins, which may wait for a
	// connection: its caller's wait is not held up by that (Ran).
	u.Ran()
	start := time.Now()
	var fnErr, err error
	for range staleRuns {
		err = c.inTx(context.Background(), true, func(t *tx) error {
			if fnErr = u.Gone(); fnErr != nil {
				return fnErr // its wait ran out meanwhile: it never runs
			}
			end := t.within(u)
			fnErr = runUnit(u.Write.fn, t)
			end()
			u.Ran()
			return fnErr
		})
		if !errors.Is(err, errStale) || fnErr != nil {
			break
		}
	}
	switch {
	case fnErr != nil:
		u.Err = fnErr
	case errors.Is(err, errStale):
		u.Err = pipeline.Wrap(pipeline.Unavailable, err, unavailableMessage)
	case err != nil:
		u.Err = err
	default:
		// Committed: its answer is nil, never the errContended its batch
		// left it, which the pipeline would take for a failure and answer
		// from the record the write just committed, as a replay.
		u.Err = nil
		c.s.observer.Observe(time.Since(start), 1)
	}
}

// inTx runs fn in a write transaction and commits it if fn returns nil:
// with its seal in the COMMIT's message if it queued audit events
// (sealCommit), errStale if the seal is refused. A failure to commit is
// UNAVAILABLE with retry same_key: a COMMIT whose connection died has an
// unknown outcome, which the key decides.
func (c *committer) inTx(ctx context.Context, alone bool, fn func(*tx) error) error {
	conn, err := c.s.pool.Acquire(ctx)
	if err != nil {
		return wrapErr("begin", err)
	}
	// Released, not closed: a connection whose transaction did not end
	// (its COMMIT's outcome unknown) is destroyed by the pool.
	defer conn.Release()
	rollback := func() { end(context.WithoutCancel(ctx), conn.Conn(), false) }
	t := &tx{ctx: ctx, s: c.s, write: true, alone: alone}
	t.begin(conn.Conn(), "BEGIN ISOLATION LEVEL READ COMMITTED")
	timeout := batchLockTimeout
	if alone {
		timeout = aloneLockTimeout
	}
	t.deferTx("set the lock timeout", timeout) // with the first statement
	if err := fn(t); err != nil {
		rollback()
		return err
	}
	if err := t.flush("commit"); err != nil {
		rollback()
		return err
	}
	if t.first == "" {
		err = end(context.WithoutCancel(ctx), conn.Conn(), true)
	} else {
		_, err = conn.Exec(context.WithoutCancel(ctx), sealCommit, pgx.QueryExecModeSimpleProtocol, t.first)
		if err != nil {
			// Its transaction aborted, unless its connection died: then
			// the rollback does not wait for it.
			rollback()
			if c.s.stale(err) {
				return errStale
			}
		}
	}
	if err != nil {
		return pipeline.Wrap(pipeline.Unavailable, &pgError{text: "postgres: commit: " + describe(err), err: err}, unavailableMessage)
	}
	return nil
}

// runUnit runs a write's fn on t, a panic its error (groupcommit.Run).
func runUnit(fn func(pipeline.Tx[handlers.Store]) error, t *tx) error {
	// Whatever returned errContended marked t contended (check, tryClaim).
	return groupcommit.Run(fn, t.bound())
}

func (c *committer) stop() { c.group.Stop() }
