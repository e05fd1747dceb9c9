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
// Verify recomputes the tree from a Stream of events and checks it against
// the checkpoints, keeping O(log n) memory; ReadExport streams an export,
// so that an auditor verifies with no database and no daemon. Filter
// selects events for a store's queries.
//
// Events hold who, what tool, which key, the request digest, the outcome and
// the entities touched; never argument values.
//
// The package holds no storage and imports no database: the log on bbolt
// is package boltlog beside it, which a backend binds to each write
// transaction as the pipeline's Audit.
package auditlog
