package postgres

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// Check runs PostgreSQL's own checks of the store: the schema is the one
// this writerd knows; the audit log's head, its events and their tree
// hashes agree (as many events as the head says, numbered 1 to its size
// without a gap, every stored hash of a tree of that size); no
// checkpoint signs more events than there are; and the events queued
// for the log, not yet integrated, all go after its last one, which is
// at or before the cut (sequencer.go). What every backend keeps
// is checked through the interfaces (pipeline.Check, handlers.Check).
func (s *Store) Check(ctx context.Context) (string, error) {
	var version, events, first, last, size, hashes, maxCheckpoint, queued int64
	var lastID, cut, leastQueued string
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT coalesce(max(version), 0) FROM writerd_schema),
		(SELECT count(*) FROM audit_events), (SELECT coalesce(min(seq), 0) FROM audit_events), (SELECT coalesce(max(seq), 0) FROM audit_events),
		(SELECT size FROM audit_head), (SELECT count(*) FROM audit_hashes),
		(SELECT coalesce(max(size), 0) FROM audit_checkpoints),
		(SELECT last_id FROM audit_head), (SELECT id FROM audit_cut),
		(SELECT count(*) FROM audit_queue), (SELECT coalesce(min(id), '') FROM audit_queue)`).Scan(&version, &events, &first, &last, &size, &hashes, &maxCheckpoint,
		&lastID, &cut, &queued, &leastQueued)
	if err != nil {
		return "", wrapErr("check", err)
	}
	checked := fmt.Sprintf("schema version %d", version)
	if queued > 0 {
		checked += fmt.Sprintf(" (%d audit events queued, not yet in the log)", queued)
	}
	var errs []error
	if version != int64(SchemaVersion) {
		errs = append(errs, fmt.Errorf("the schema is at version %d, not %d", version, SchemaVersion))
	}
	if events != size || last != size || events > 0 && first != 1 {
		errs = append(errs, fmt.Errorf("the audit log's head says %d events, but %d are stored, numbered %d to %d", size, events, first, last))
	}
	if want := tlog.StoredHashCount(size); hashes != want {
		errs = append(errs, fmt.Errorf("the audit log stores %d tree hashes, not the %d of a tree of %d events", hashes, want, size))
	}
	if maxCheckpoint > size {
		errs = append(errs, fmt.Errorf("a checkpoint signs %d events, but the log has %d", maxCheckpoint, size))
	}
	if cut < lastID {
		errs = append(errs, fmt.Errorf("the audit log's cut %q is before its last event %q", cut, lastID))
	}
	if queued > 0 && leastQueued <= lastID {
		errs = append(errs, fmt.Errorf("an event queued for the audit log, %q, is not after its last one, %q", leastQueued, lastID))
	}
	return checked, errors.Join(errs...)
}
