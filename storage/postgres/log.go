package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
)

// log is the audit log of a transaction: auditlog's read seam, and the
// append.
type log struct{ t *tx }

// leavesPage is how many events Leaves reads a statement.
const leavesPage = 1000

// Size is the head's: the events integrated (sequencer.go).
func (l log) Size() (uint64, error) {
	l.t.settle()
	var size int64
	err := l.t.q.QueryRow(l.t.ctx, "SELECT size FROM audit_head").Scan(&size)
	return uint64(size), l.t.check("read the log's size", err)
}

func (l log) Leaf(seq uint64) ([]byte, error) {
	if seq == 0 || seq > 1<<62 {
		return nil, auditlog.ErrNotFound
	}
	l.t.settle()
	var c []byte
	err := l.t.q.QueryRow(l.t.ctx, "SELECT canonical FROM audit_events WHERE seq = $1", int64(seq)).Scan(&c)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, auditlog.ErrNotFound
	}
	return c, l.t.check("read an event", err)
}

// Leaves reads the events a page at a time, so that a stream stopped
// early reads no more than a page past it.
func (l log) Leaves(from uint64) auditlog.Stream {
	return func(yield func(seq uint64, canonical []byte, leafCheck []byte) bool) error {
		if from > 1<<62 {
			return nil
		}
		l.t.settle()
		next := int64(from)
		for {
			rows, err := l.t.q.Query(l.t.ctx, "SELECT seq, canonical, leaf_check FROM audit_events WHERE seq >= $1 ORDER BY seq LIMIT $2", next, leavesPage)
			if err != nil {
				return l.t.check("read the events", err)
			}
			type leaf struct {
				seq      int64
				c, check []byte
			}
			var page []leaf
			for rows.Next() {
				var e leaf
				if err := rows.Scan(&e.seq, &e.c, &e.check); err != nil {
					rows.Close()
					return l.t.check("read the events", err)
				}
				page = append(page, e)
			}
			if err := rows.Err(); err != nil {
				return l.t.check("read the events", err)
			}
			for _, e := range page {
				if !yield(uint64(e.seq), e.c, e.check) {
					return nil
				}
			}
			if len(page) < leavesPage {
				return nil
			}
			next = page[len(page)-1].seq + 1
		}
	}
}

func (l log) ReadHashes(indexes []int64) ([]tlog.Hash, error) { return l.t.ReadHashes(indexes) }

func (l log) Checkpoints() ([][]byte, error) {
	l.t.settle()
	rows, err := l.t.q.Query(l.t.ctx, "SELECT signed FROM audit_checkpoints ORDER BY size")
	if err != nil {
		return nil, l.t.check("read the checkpoints", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	return out, l.t.check("read the checkpoints", err)
}

func (l log) LatestCheckpoint() (uint64, []byte, error) {
	l.t.settle()
	var size int64
	var signed []byte
	err := l.t.q.QueryRow(l.t.ctx, "SELECT size, signed FROM audit_checkpoints ORDER BY size DESC LIMIT 1").Scan(&size, &signed)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, auditlog.ErrNotFound
	}
	return uint64(size), signed, l.t.check("read the latest checkpoint", err)
}

// PutCheckpoint stores a checkpoint, replacing one of the same size: the
// tree of a size has one root, and the cosigner stores the same note again
// with the witnesses' cosignatures added (auditlog.Writer).
func (l log) PutCheckpoint(size uint64, signed []byte) error {
	_, err := l.t.exec("store a checkpoint", "INSERT INTO audit_checkpoints (size, signed) VALUES ($1, $2) ON CONFLICT (size) DO UPDATE SET signed = EXCLUDED.signed", int64(size), signed)
	return err
}

// Append gives e its id and time after the last event of this replica
// and every cut it has seen, and queues it in the transaction, with no
// sequence number: an integration gives it its place in the log, shortly
// after the transaction commits, in id order (sequencer.go). Its id is
// final: the caller may answer it.
func (l log) Append(e *auditlog.Event) error {
	t := l.t
	if err := t.s.clock.follow(e); err != nil {
		return err
	}
	e.Seq = 0
	c, err := e.Canonical()
	if err != nil {
		return err
	}
	// Sent with the write's next statement (its key's record), or at its
	// end: nothing waits for its result but its error.
	t.deferExec("queue an event", "INSERT INTO audit_queue (id, event) VALUES ($1, $2)", e.ID, c)
	if t.first == "" || e.ID < t.first {
		t.first = e.ID
	}
	return nil
}

var _ auditlog.Writer = log{}
