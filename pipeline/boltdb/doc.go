// Package boltdb is writerd's embedded storage: one bbolt file holding the
// domain, the idempotency records and the audit log, so that one bbolt
// transaction commits a write, its record and its audit event together.
//
// DB runs transactions of one type, *kv.Tx (a bbolt transaction with
// savepoints), which every bbolt store takes: idempotency/boltkeys,
// auditlog/boltlog, handlers/boltstore. Writes are group-committed
// (group.go), and every commit is fsynced before Update returns. Storage
// (NewStorage) is the pipeline's Storage[D] on a DB or a Pending: each of
// its transactions binds the key store, the audit log and the domain
// store D to one *kv.Tx.
//
// bbolt maps the file and trusts it: a truncated file or a damaged page
// faults (SIGBUS, SIGSEGV), which no recover can catch. So Open and
// OpenReadOnly first read the file with ReadAt and check it against its
// own meta pages (size, magic, version, checksums) and every page of its
// tree (file.go), and Open runs bbolt's own consistency check once mapped;
// a damaged file is a *DamagedError, one sentence naming the damage. On a
// database of 100k writes (303 MiB) the checks cost Open about 140 ms
// (BenchmarkStartup). Check adds the pipeline's invariants, for tests and
// writerd check.
//
// Pending is the Storage of a daemon whose database another process holds:
// it answers UNAVAILABLE (retry same_key) with HeldMessage and opens the
// database as soon as it is free.
//
// Errors never carry the data directory's path: storage errors name the
// file as <data>/writerd.db (docs/DESIGN.md section 8), and unwrap to the
// original error.
//
// Caveats: bbolt allows one writer at a time and one process per file (an
// exclusive file lock); Open fails fast with ErrLocked if another process
// holds the file. The checks read the file as bbolt v1.5 lays it out.
package boltdb
