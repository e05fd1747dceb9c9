// Package idempotency keeps the idempotency records of writerd: for each
// (principal, key) the digest of the request that spent the key, whether the
// write completed or failed, the stored result or failure code, the audit
// event id and an expiry.
//
// In the write path (docs/DESIGN.md section 1, stages 5 and 7) the pipeline
// looks the key up in a read transaction first, then again inside the
// transaction that runs the handler, and writes the record in that
// transaction too, so a crash leaves either no record or the record
// together with its write and audit event.
//
// Match is the state machine: a live record with the same digest replays (or,
// if the write failed, answers IDEMPOTENCY_KEY_FAILED); a different digest is
// a reused key. An expired record is as good as none: the key is new again.
//
// Locks serialises calls that share a key inside one process, with a bounded
// wait, so that an identical concurrent retry waits for the first call and
// then replays its answer instead of running the handler twice.
//
// The package holds no storage: each backend keeps the records (bbolt's
// is storage/bolt/boltkeys) and binds its store to each transaction as
// the pipeline's Keys.
//
// Caveats: Locks is in-process only. The bbolt store holds an exclusive
// file lock, so no second process can share it; a backend that several
// processes share keeps their calls of one key apart itself, by the claim
// rule that pipeline.Keys states (Claim waits for another process's write
// of the key and answers from its record, or ErrInUse).
package idempotency
