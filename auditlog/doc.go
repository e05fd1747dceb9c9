// Package auditlog is writerd's audit log, apart from any store: the
// event (one per dispatched write, success or failure, appended in the
// same transaction as the write itself; docs/DESIGN.md section 1, stage
// 8, and section 7), the signed checkpoints of its Merkle tree, and the
// verification of a log from its events alone.
//
// Each event gets a dense sequence number from 1 and a ULID. Its stored form
// is its RFC 8785 canonical JSON (Canonical): those bytes never change once
// written, and they are the leaf of the tree (RFC 6962 hashing, as
// golang.org/x/mod/sumdb/tlog computes it). Checkpoints are C2SP signed
// notes of the tree's size and root.
//
// A backend keeps the log behind a small read seam (Reader: the size, each
// event's canonical bytes, a stream of them, the stored tree hashes, the
// checkpoints; Writer adds storing a checkpoint; Storage runs the
// transactions). Everything an auditor reads is computed from it here,
// the same on every backend: Get and ByID (a binary search: ids grow with
// the sequence), List with a Filter and a cursor, TreeHash, inclusion and
// consistency proofs, exports. The Checkpointer signs checkpoints by one
// policy (every N events, every interval, at shutdown) over Storage.
//
// The log is also cut into C2SP tlog-tiles (tiles.go: the tree's hash
// tiles and entry bundles of the events' canonical JSON, bounded by a
// signed tree size), which generic transparency-log clients read and
// authenticate against a checkpoint with no writerd code; Publisher
// (publish.go) copies them into a static directory for any web server,
// the checkpoint last (writerd audit publish).
//
// Verify recomputes the tree from a Stream of events and checks it against
// the checkpoints, keeping O(log n) memory; ReadExport streams an export,
// so that an auditor verifies with no database and no daemon. The audit
// protocol over HTTP, server and client, is package httpapi/auditapi.
//
// Events hold who, what tool, which key, the request digest, the outcome and
// the entities touched; never argument values.
//
// The package holds no storage and imports no database: each backend
// keeps the log (bbolt's is storage/bolt/boltlog) and binds it to each
// transaction as the pipeline's Audit, which is a Writer that appends.
package auditlog
