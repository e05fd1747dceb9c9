// Package boltdb is writerd's embedded storage: one bbolt file holding the
// domain, the idempotency records and the audit log, so that one bbolt
// transaction commits a write, its record and its audit event together.
//
// DB implements pipeline.Storage. Its transactions are *bbolt.Tx values,
// which the bbolt stores of idempotency, auditlog and handlers/boltstore
// take as their pipeline.Tx. Every commit is fsynced before Update returns.
//
// Caveats: bbolt allows one writer at a time and one process per file (an
// exclusive file lock); Open fails fast if another process holds the file.
package boltdb
