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

// Size is the head's: this transaction's if it appended, else the last
// committed.
func (l log) Size() (uint64, error) {
	if l.t.head != nil {
		return l.t.head.size, nil
	}
	var size int64
	err := l.t.q.QueryRow(l.t.ctx, "SELECT size FROM audit_head").Scan(&size)
	return uint64(size), l.t.check("read the log's size", err)
}

func (l log) Leaf(seq uint64) ([]byte, error) {
	if seq == 0 || seq > 1<<62 {
		return nil, auditlog.ErrNotFound
	}
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
	rows, err := l.t.q.Query(l.t.ctx, "SELECT signed FROM audit_checkpoints ORDER BY size")
	if err != nil {
		return nil, l.t.check("read the checkpoints", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	return out, l.t.check("read the checkpoints", err)
}

func (l log) LatestCheckpoint() (uint64, []byte, error) {
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

// Append gives e the sequence number after the head's, its time and id
// after the last event's, and stores it with the tree hashes it adds, in
// the transaction. The head stays locked until the transaction ends, so
// that no other append, on any replica, comes between.
func (l log) Append(e *auditlog.Event) error {
	t := l.t
	h, err := t.lockHead()
	if err != nil {
		return err
	}
	if err := e.Follow(h.lastID, h.lastTime); err != nil {
		return err
	}
	e.Seq = h.size + 1
	c, err := e.Canonical()
	if err != nil {
		return err
	}
	n := int64(e.Seq - 1)
	hashes, err := tlog.StoredHashes(n, c, t)
	if err != nil {
		return err
	}
	first := tlog.StoredHashIndex(0, n)
	idx := make([]int64, len(hashes))
	vals := make([][]byte, len(hashes))
	for i, hash := range hashes {
		idx[i], vals[i] = first+int64(i), hash[:]
	}
	// Sent with the write's next statement (its key's record), or at its
	// end: nothing waits for its result but its error.
	t.deferExec("store an event", "WITH e AS (INSERT INTO audit_events (seq, leaf_check, canonical) VALUES ($1, $2, $3)) "+
		"INSERT INTO audit_hashes (idx, hash) SELECT * FROM unnest($4::bigint[], $5::bytea[])",
		int64(e.Seq), hashes[0][:8], c, idx, vals)
	if t.hashes == nil {
		t.hashes = map[int64]tlog.Hash{}
	}
	for i, hash := range hashes {
		t.hashes[idx[i]] = hash
		t.journal = append(t.journal, idx[i])
	}
	h.size, h.lastID, h.lastTime, h.dirty = e.Seq, e.ID, e.Time, true
	return nil
}
