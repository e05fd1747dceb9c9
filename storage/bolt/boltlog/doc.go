// Package boltlog keeps writerd's audit log on bbolt: the events, the
// hashes of their Merkle tree, and the signed checkpoints.
//
// Events are stored under their sequence number, each value the tree
// hashes its append completed (the start of its leaf hash, then the inner
// hashes; tree.go) followed by its canonical JSON, so that proofs and
// checkpoints read stored hashes instead of rehashing the log. Ids and
// times never decrease along the log, so lookups by id or time are binary
// searches, with no index. Both buckets only grow and are filled to the
// brim. A log written before the tree existed is converted by Init.
//
// Log is the log bound to one transaction (Bind, of a *kv.Tx): the
// pipeline's audit log in a write transaction, and auditlog's read seam
// (Reader, Writer) for every reader. Lookups, listing, roots, proofs and
// exports are package auditlog's, over the seam, the same on every
// backend; this package keeps the events, the stored hashes
// (ReadHashes) and the checkpoints.
//
// Caveats: sequence numbers come from the bucket's sequence, which a rolled
// back transaction (or savepoint) also rolls back, so the sequence stays
// dense only because every append happens inside the write transaction it
// records.
package boltlog
