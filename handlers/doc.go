// Package handlers holds writerd's built-in tools (docs/DESIGN.md section 6): a
// small store of projects and of the records inside them, which agents
// create, update, read and delete.
//
// Tools returns the tool definitions for a pipeline to register. Each
// handler runs at stage 7 of the write path, inside the transaction that
// also commits the call's idempotency record and audit event, so a handler
// only reads and writes through the Store it is given and returns either a
// result or one of the domain codes NOT_FOUND, REVISION_CONFLICT,
// ALREADY_EXISTS, RECORD_LOCKED and PROJECT_NOT_EMPTY. Its input has already
// been parsed strictly against the schema generated from its input type, and
// checked by the input's Validate for the text rules a schema cannot state
// (names, titles, NUL; see text.go), so handlers check only existence,
// revisions and locks (the Store keeps names unique). Every entity a write
// changes, and the entity a refusal is about, is named to the pipeline with
// Op.Touch for the audit event.
//
// The Store interface is owned here, so that each backend implements it
// beside its own storage (storage/bolt/boltstore, storage/postgres)
// without touching the handlers.
//
// Semantics worth knowing:
//
//   - Every successful update increments the revision, even one that names
//     no field to change; expected_revision guards updates and, optionally,
//     deletions.
//   - An update replaces each field it names as a whole: "labels" and
//     "fields" are not merged with the stored ones.
//   - A locked record refuses updates and deletion; an update that sets
//     "locked": false unlocks it and applies its other changes in the same
//     write.
//   - Names are stored as the PRECIS Nickname profile enforces them (NFKC,
//     spaces mapped) and are unique by NameKey, which also ignores case:
//     "Alpha" and "alpha" cannot both exist, and a project may change the
//     case of its own name.
//   - Lists are ordered by id, which is creation order (ids are ULIDs). The
//     cursor is the id of the last item of the previous page, and its
//     schema says so; entities created after a page was read may appear on
//     later pages, entities deleted meanwhile do not.
//   - An unconfirmed delete answers the refusal the confirmed call would
//     meet (NOT_FOUND, REVISION_CONFLICT, RECORD_LOCKED, PROJECT_NOT_EMPTY)
//     instead of a preview: both go through one check.
//   - delete_records (batch.go) sends each record it selects, at most 200,
//     through removeRecord, delete_record's own path: a refusal is reported
//     per record, grouped by code, and the walk goes on; any other error is
//     a fault, which the handler returns, so that the pipeline rolls the
//     whole call back, with a detail in the error envelope saying that
//     nothing was deleted and where the walk stopped. Its audit event names
//     the records deleted, and on an INTERNAL fault the record it stopped
//     at; an UNAVAILABLE one records no event.
//
// Caveats: a project's records are not deleted with it (delete_project
// refuses while any remain), and a preview is read at preview time: the
// confirmed call checks again.
package handlers
