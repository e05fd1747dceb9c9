package boltdb

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
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

// unit is one write waiting for its turn.
type unit struct {
	fn   func(*kv.Tx) error
	err  error
	done chan struct{}
}

// committer runs the writes of one database.
type committer struct {
	db       *bolt.DB
	dir      string
	queue    chan *unit
	quit     chan struct{} // closed to stop the loop
	stopped  chan struct{} // closed when the loop has returned
	stopOnce sync.Once

	mu       sync.Mutex
	observer func(d time.Duration, writes int)
}

func newCommitter(db *bolt.DB, dir string) *committer {
	c := &committer{db: db, dir: dir, queue: make(chan *unit, MaxBatch),
		quit: make(chan struct{}), stopped: make(chan struct{})}
	go c.loop()
	return c
}

// errClosed answers a write that came after the database closed.
var errClosed = pipeline.Wrap(pipeline.Unavailable, bolterrors.ErrDatabaseNotOpen, "The store is closed; send the call again with the same key later.")

// write queues fn and waits for its outcome: fn's own error (its changes
// rolled back), the commit's error, or nil once committed durably.
func (c *committer) write(ctx context.Context, fn func(*kv.Tx) error) error {
	u := &unit{fn: fn, done: make(chan struct{})}
	select {
	case <-c.quit:
		return errClosed
	default:
	}
	select {
	case c.queue <- u:
	case <-c.quit:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued, the write is answered whatever happens: it may be
	// committed even if ctx ends meanwhile. If the loop stopped before
	// taking it, it never ran.
	select {
	case <-u.done:
		return u.err
	case <-c.stopped:
		select {
		case <-u.done:
			return u.err
		default:
			return errClosed
		}
	}
}

func (c *committer) loop() {
	defer close(c.stopped)
	batch := make([]*unit, 0, MaxBatch)
	for {
		select {
		case u := <-c.queue:
			batch = append(batch[:0], u)
		case <-c.quit:
			c.drain()
			return
		}
	more:
		for len(batch) < MaxBatch {
			select {
			case u := <-c.queue:
				batch = append(batch, u)
			default:
				break more
			}
		}
		c.commit(batch)
		// Forget the batch: a write's fn holds its transaction, and with
		// it every page bbolt read or wrote in it, until overwritten.
		clear(batch)
	}
}

// commit runs a batch in one transaction and answers its writes.
func (c *committer) commit(batch []*unit) {
	start := time.Now()
	ran := 0
	err := c.db.Update(func(btx *bolt.Tx) error {
		tx := kv.Wrap(btx)
		for _, u := range batch {
			sp := tx.Savepoint()
			if u.err = runUnit(u.fn, tx); u.err != nil {
				if err := tx.RollbackTo(sp); err != nil {
					return fmt.Errorf("boltdb: roll back a failed write: %w", err)
				}
				continue
			}
			ran++
		}
		return nil
	})
	c.observe(time.Since(start), ran)
	for _, u := range batch {
		if err != nil && u.err == nil {
			u.err = classify(redact(c.dir, err))
		}
		close(u.done)
	}
}

// runUnit runs a write's fn, turning a panic into an error.
func runUnit(fn func(*kv.Tx) error, tx *kv.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(tx)
}

// drain answers the writes still queued when the database closes.
func (c *committer) drain() {
	for {
		select {
		case u := <-c.queue:
			u.err = errClosed
			close(u.done)
		default:
			return
		}
	}
}

// stop ends the loop after the batch in flight, answering the rest
// UNAVAILABLE.
func (c *committer) stop() {
	c.stopOnce.Do(func() { close(c.quit) })
	<-c.stopped
}

func (c *committer) observe(d time.Duration, writes int) {
	c.mu.Lock()
	f := c.observer
	c.mu.Unlock()
	if f != nil {
		f(d, writes)
	}
}
