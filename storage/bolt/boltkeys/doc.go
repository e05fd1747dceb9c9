// Package boltkeys stores writerd's idempotency records on bbolt.
//
// Records are kept in the order they expire, under expires-at then a
// sequence number, so that their bucket grows at its end, filled to the
// brim, and collection cuts it from its start, touching expired records
// only and opening no write transaction when none expired. An index maps
// principal 0x00 key to a record's storage key: the only bucket a write
// inserts into at a random place. A record's own members are
// length-prefixed (record.go); its result is kept as it is, so that a
// replay gives back the bytes of the first answer. An unsettled record
// (pending, or unknown without a resolution: writes outside the store) is
// kept past every other, which the collector never reaches and skips by
// its state besides, and in an index of its own by creation time, which
// Unsettled reads. docs/DESIGN.md section 10 has the layout and its
// measurements.
//
// Store's methods take the caller's transaction (a *kv.Tx, so that a
// write is one the savepoints of group commit can undo) and never open
// one of their own; storage/bolt binds them to each transaction as the
// pipeline's key store. Check verifies the index against the records, for
// tests and writerd check.
//
// A store of the earlier layout (JSON records under principal and key,
// with an expiry index beside them) is converted by Init.
package boltkeys
