package bolt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"syscall"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/internal/groupcommit"
)

// A commit that fails is one of two kinds, and the committer answers
// each its own way (docs/DESIGN.md section 10).
//
// Full: the file system had no room for a page the commit wrote (ENOSPC,
// or EDQUOT, from writing a page or growing the file). bbolt rolls the
// transaction back, and nothing it wrote is reachable: its pages lie
// outside the tree until the meta page points at them, which bbolt
// writes last, once they are synced, into a page the file already has.
// The write is answered UNAVAILABLE,
// the store is not ready, and every later write is tried as it comes:
// the first that commits ends the state, as does a probe that finds room
// (probe). It clears by itself once space returns.
//
// Poisoned: any other failure to write or sync the file (EIO, a failed
// fdatasync, even one that reports ENOSPC). After a failed fsync the
// kernel may have dropped the dirty pages and marked them clean, so that
// a later fsync succeeds over data that never reached the disk (as
// PostgreSQL learned in 2018, and answers by stopping); and bbolt's own
// view of the file may then hold a commit it reported as failed, since
// the mapping shows what the page cache holds. So the committer latches
// the first such error: the writes of that commit are answered
// UNAVAILABLE (their outcome is unknown; the key decides it after the
// restart), and from then on no commit is attempted and no read is
// served, so that nothing is acknowledged or replayed from pages that
// may not be on the disk. One error line is logged. A restart opens the
// file again, whose checks and writerd check decide what reached the
// disk.

// ErrPoisoned is in the chain of every error a poisoned store answers
// (errors.Is), after the failed commit's own.
var ErrPoisoned = errors.New("boltdb: a commit failed to reach the disk; the store takes no call until it is opened again")

// FullMessage is what a write is told while the disk is full.
const FullMessage = "The store's disk is full; send the call again with the same key in a little while: writes resume by themselves as soon as its operator frees space."

// PoisonedMessage is what every call is told once a commit failed to
// reach the disk.
const PoisonedMessage = "The store failed to write to its disk, and writerd takes no call until its operator restarts it; after the restart, send the call again (a write with the same key): a write that reached the disk is then answered from its record, and any other runs."

// ProbeRoom is the room Ready's probe reserves past the end of the data
// while the disk is full. A write adds some 2 KiB to the file (writerd
// bench, docs/DESIGN.md section 10), so a full batch of MaxBatch writes
// fits in it with room to spare.
const ProbeRoom = 1 << 20

// commitFailed classifies the error of a commit (bbolt's Tx.Commit: its
// pages written, the file grown, synced, its meta page written and
// synced) and answers with what the commit's writes are told. A full disk
// marks the committer full; anything else poisons it.
func (c *committer) commitFailed(err error) error {
	cause := redact(c.dir, fmt.Errorf("boltdb: commit: %w", err))
	if noSpace(err) {
		e := pipeline.Wrap(pipeline.Unavailable, cause, FullMessage)
		c.full.Store(e)
		return e
	}
	return c.poison(cause)
}

// poison latches the committer poisoned by cause, logging it once, and
// returns what the failed commit's writes are told. Every later call is
// answered with the latched error, which names cause for the log.
func (c *committer) poison(cause error) error {
	later := pipeline.Wrap(pipeline.Unavailable, fmt.Errorf("%w (since: %w)", ErrPoisoned, cause), PoisonedMessage)
	if c.poisoned.CompareAndSwap(nil, later) {
		c.logger().Error("the store failed to write to its disk; writerd takes no call until it is restarted, and then its checks and writerd check decide what reached the disk",
			"cause", cause.Error())
	}
	return pipeline.Wrap(pipeline.Unavailable, fmt.Errorf("%w: %w", ErrPoisoned, cause), PoisonedMessage)
}

// noSpace reports whether a commit failed for want of space before
// anything it wrote needed syncing: ENOSPC or EDQUOT from writing a page
// (os.File.WriteAt's *fs.PathError, op "write"), or from growing the file
// (bbolt keeps only the text of that error: "file resize error: …"). The
// same errno from fdatasync itself is not: the kernel may have dropped
// pages it had taken, and the committer is poisoned.
func noSpace(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return (pe.Op == "write" || pe.Op == "truncate") && outOfSpace(pe.Err)
	}
	text := err.Error()
	return strings.HasPrefix(text, "file resize error: ") &&
		(strings.HasSuffix(text, syscall.ENOSPC.Error()) || strings.HasSuffix(text, syscall.EDQUOT.Error()))
}

// outOfSpace reports whether err is the file system's refusal of space.
func outOfSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// ready answers Ready: the latched error of a poisoned committer at once;
// otherwise a probe, which runs on the committer in its turn, between
// transactions. While the disk is not full, the probe commits an empty
// transaction: the database is open and its committer runs. While it is
// full, an empty commit proves nothing (it rewrites the freelist and a
// meta page, in pages the file already has), so the probe reserves room
// instead (probe).
func (c *committer) ready(ctx context.Context) error {
	// The probe's wait for its turn and its batch's commit ends with
	// ctx's: a commit that does not come (a stalled fsync) leaves the
	// store unready rather than the probe hanging.
	if d, ok := ctx.Deadline(); ok {
		ctx = pipeline.WithStoreDeadline(ctx, d)
	}
	return c.submit(ctx, write{probe: true})
}

// probe answers the probes of a batch while the disk is full, and
// returns the batch's writes. A probe asks the file system for
// ProbeRoom bytes of the database's file, right past the end of its
// data (bbolt's high-water mark), where the pages a commit adds go once
// the freelist has none: fallocate, keeping the file's size, where the
// file system has it (reserve). That needs new space, as the refused
// commit did; and what it gets stays the file's, so the next writes
// find it there even if another process writes to the disk meanwhile.
// If it succeeds, the disk is no longer full and every probe of the
// batch is answered nil; if not, with the full disk's error. Writes
// need no probe: each is tried, and the first that commits ends the
// full state too.
func (c *committer) probe(batch []*unit) []*unit {
	writes := batch[:0]
	var probes []*unit
	for _, u := range batch {
		if u.Write.probe {
			probes = append(probes, u)
		} else {
			writes = append(writes, u)
		}
	}
	if len(probes) == 0 {
		return writes
	}
	var end int64
	err := c.db.View(func(tx *bolt.Tx) error {
		end = tx.Size()
		return nil
	})
	if err == nil {
		err = reserve(c.file, end, ProbeRoom)
	}
	if err == nil {
		c.full.Store(nil)
	} else {
		// No room, or the file system could not say: a probe that cannot
		// run is no sign of room, and no cause to poison the store.
		err = pipeline.Wrap(pipeline.Unavailable, redact(c.dir, fmt.Errorf("boltdb: probe for room: %w", err)), FullMessage)
	}
	groupcommit.AnswerAll(probes, err)
	return writes
}

// refused returns the latched error of a poisoned committer, or nil.
func (c *committer) refused() error {
	if e := c.poisoned.Load(); e != nil {
		return e
	}
	return nil
}

func (c *committer) logger() *slog.Logger {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c.log
}

// writeZeros writes n zero bytes to f from off: past the end of the
// data, where no page of the tree lies, so that the file system must
// find room for them.
func writeZeros(f *os.File, off, n int64) error {
	zeros := make([]byte, 64<<10)
	for n > 0 {
		b := zeros[:min(n, int64(len(zeros)))]
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off, n = off+int64(len(b)), n-int64(len(b))
	}
	return nil
}
