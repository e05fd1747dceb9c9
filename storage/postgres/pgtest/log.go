package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
)

// HoldSequencer takes the audit log's sequencer exclusive, as an
// integrator moving the cut does for one statement, for as long as its
// transaction lasts: every write's commit waits for it meanwhile. Its
// key is storage/postgres's sequenceKey ("writerd" 3), which
// migrations/0004_sequencer.sql's writerd_seal names.
const HoldSequencer = "SELECT pg_advisory_xact_lock(8607057786497557507)"

// AppendEarlier appends e to the audit log of the database url names, at
// rest, as a writerd of event format 1 stored it, before events said
// their format: it gives e its place after the head's last event
// (auditlog.Event.Follow, as the backend's Append does), clears its
// format, and stores its canonical JSON, which then has no "format"
// member, with its leaf check and the tree hashes its append adds, and
// the head and the cut moved on, in one transaction. It returns the bytes stored.
// (auditlog's TestEvent_Format1KeepsItsBytes holds the encoding without
// the member to an event stored at that time.)
func AppendEarlier(t testing.TB, url string, e *auditlog.Event) []byte {
	t.Helper()
	var c []byte
	withConn(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var size, last int64
			var lastID string
			if err := tx.QueryRow(ctx, "SELECT size, last_id, last_time FROM audit_head FOR UPDATE").Scan(&size, &lastID, &last); err != nil {
				return err
			}
			var lastTime time.Time
			if last != 0 {
				lastTime = time.Unix(0, last).UTC()
			}
			if err := e.Follow(lastID, lastTime); err != nil {
				return err
			}
			e.Format = 0 // format 1: no member
			e.Seq = uint64(size + 1)
			var err error
			if c, err = e.Canonical(); err != nil {
				return err
			}
			hashes, err := tlog.StoredHashes(size, c, hashReader{ctx, tx})
			if err != nil {
				return err
			}
			first := tlog.StoredHashIndex(0, size)
			idx := make([]int64, len(hashes))
			vals := make([][]byte, len(hashes))
			for i, h := range hashes {
				idx[i], vals[i] = first+int64(i), h[:]
			}
			if _, err := tx.Exec(ctx, "INSERT INTO audit_events (seq, leaf_check, canonical) VALUES ($1, $2, $3)", size+1, hashes[0][:8], c); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO audit_hashes (idx, hash) SELECT * FROM unnest($1::bigint[], $2::bytea[])", idx, vals); err != nil {
				return err
			}
			if _, err = tx.Exec(ctx, "UPDATE audit_head SET size = $1, last_id = $2, last_time = $3", size+1, e.ID, e.Time.UnixNano()); err != nil {
				return err
			}
			// The cut, past which the replicas' events go, at it too.
			_, err = tx.Exec(ctx, "UPDATE audit_cut SET id = $1 WHERE id < $1", e.ID)
			return err
		})
	})
	return c
}

// hashReader reads the tree's stored hashes, as the backend keeps them:
// one row per index.
type hashReader struct {
	ctx context.Context
	tx  pgx.Tx
}

func (r hashReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, index := range indexes {
		var b []byte
		if err := r.tx.QueryRow(r.ctx, "SELECT hash FROM audit_hashes WHERE idx = $1", index).Scan(&b); err != nil {
			return nil, err
		}
		copy(out[i][:], b)
	}
	return out, nil
}
