package bolt

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/kv"
	"github.com/writerd/writerd/storage/internal/groupcommit"
)

// MaxBatch bounds the writes one transaction commits.
const MaxBatch = 256

// Group commit, without a timer: every fsync is shared by as many writes as
// arrived while the previous one ran. A lone write commits at once, as
// bbolt's Update would; while a commit is in flight, every write that
// arrives joins the next transaction, up to MaxBatch. Each write runs in
// its turn, in arrival order, against the state the writes before it left,
// so two writes that conflict (one name, one revision) are decided exactly
// as if committed one by one; and each behind a savepoint (package kv), so
// that a write that fails or panics rolls back its own changes only and
// never re-runs or disturbs the others. All are answered once the
// transaction holding them is durable, or has failed.
//
// A commit that fails is told apart by its cause (refuse.go): a full disk
// is transient, and the committer goes on trying the writes that come;
// any other failure to write or sync the file poisons the committer,
// which then attempts no commit at all until the database is opened
// again.

// write is what a unit of the group commit holds: one write, or Ready's
// probe (fn nil).
type write struct {
	fn    func(*kv.Tx) error
	probe bool
}

type unit = groupcommit.Unit[write]

// committer runs the writes of one database on the shared loop
// (storage/internal/groupcommit), committing each batch in one bbolt
// transaction.
type committer struct {
	db    *bolt.DB
	file  *os.File // bbolt's own, for the probe's reservation
	dir   string
	group *groupcommit.Committer[write]

	// full is the answer of the last commit refused for want of space,
	// until a commit or a probe succeeds; poisoned, once set, answers
	// every write and read until the database is opened again
	// (refuse.go).
	full     atomic.Pointer[pipeline.Error]
	poisoned atomic.Pointer[pipeline.Error]

	observer groupcommit.Observer

	mu  sync.Mutex
	log *slog.Logger
}

func newCommitter(db *bolt.DB, file *os.File, dir string) *committer {
	c := &committer{db: db, file: file, dir: dir}
	c.group = groupcommit.Start(MaxBatch, errClosed, c.commit)
	return c
}

// errClosed answers a write that came after the database closed.
var errClosed = pipeline.Wrap(pipeline.Unavailable, bolterrors.ErrDatabaseNotOpen, "The store is closed; send the call again with the same key later.")

// write queues fn and waits for its outcome: fn's own error (its changes
// rolled back), the commit's error, or nil once committed durably.
func (c *committer) write(ctx context.Context, fn func(*kv.Tx) error) error {
	return c.submit(ctx, write{fn: fn})
}

// submit queues w and waits for its answer. A poisoned committer answers
// at once, queueing nothing.
func (c *committer) submit(ctx context.Context, w write) error {
	if e := c.poisoned.Load(); e != nil {
		return e
	}
	return c.group.Submit(ctx, w)
}

// commit runs a batch in one transaction and answers its writes. A
// poisoned committer answers them without a transaction; while the disk
// is full, Ready's probes in the batch reserve room instead of committing
// (probe).
func (c *committer) commit(batch []*unit) (again []*unit) {
	if e := c.poisoned.Load(); e != nil {
		groupcommit.AnswerAll(batch, e)
		return nil
	}
	if c.full.Load() != nil {
		if batch = c.probe(batch); len(batch) == 0 {
			return nil
		}
	}
	start := time.Now()
	ran, err := c.transact(batch)
	if err == nil {
		// A failed commit committed nothing, and is not observed: the
		// observers (the metrics, the checkpointer's wake-up) count
		// what reached the disk.
		c.observer.Observe(time.Since(start), ran)
		if ran > 0 {
			c.full.Store(nil) // writes succeed again
		}
	}
	for _, u := range batch {
		if err != nil && u.Err == nil {
			u.Err = err
		}
		u.Answer()
	}
	return nil
}

// transact runs the batch's writes in one bbolt transaction and commits
// it. It returns how many of the writes ran without error, and the
// error of the transaction as its writes are answered: a commit that
// failed is classified by commitFailed, which may poison the committer.
// A probe (fn nil) writes nothing.
func (c *committer) transact(batch []*unit) (ran int, err error) {
	btx, err := c.db.Begin(true)
	if err != nil {
		return 0, classify(redact(c.dir, err))
	}
	defer func() {
		if btx.DB() != nil {
			btx.Rollback()
		}
	}()
	tx := kv.Wrap(btx)
	for _, u := range batch {
		if u.Write.fn == nil {
			continue
		}
		if u.Err = u.Gone(); u.Err != nil {
			continue // its caller went away: it never runs
		}
		sp := tx.Savepoint()
		u.Err = groupcommit.Run(u.Write.fn, tx)
		u.Ran()
		if u.Err != nil {
			if err := tx.RollbackTo(sp); err != nil {
				return 0, fmt.Errorf("boltdb: roll back a failed write: %w", err)
			}
			continue
		}
		ran++
	}
	if err := btx.Commit(); err != nil {
		return 0, c.commitFailed(err)
	}
	return ran, nil
}

// stop ends the loop after the batch in flight, answering the rest
// UNAVAILABLE.
func (c *committer) stop() { c.group.Stop() }
