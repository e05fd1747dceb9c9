// Package auditlog keeps writerd's audit events: one per dispatched write,
// success or failure, appended in the same transaction as the write itself
// (docs/DESIGN.md section 1, stage 8, and section 7).
//
// Each event gets a dense sequence number from 1 and a ULID. Its stored form
// is its RFC 8785 canonical JSON: those bytes never change once written, so
// a later Merkle tree over the log (leaf = stored bytes) can be built over
// events written before it existed.
//
// Events hold who, what tool, which key, the request digest, the outcome and
// the entities touched; never argument values.
//
// Caveats: sequence numbers come from the bucket's sequence, which a rolled
// back transaction also rolls back, so the sequence stays dense only because
// every append happens inside the write transaction it records.
package auditlog
