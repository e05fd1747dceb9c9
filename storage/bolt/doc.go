// Package bolt is writerd's embedded storage: one bbolt file holding the
// domain, the idempotency records and the audit log, so that one bbolt
// transaction commits a write, its record and its audit event together.
//
// The backend is this one subtree: this package, kv (the transaction with
// savepoints every store takes), boltkeys (idempotency records), boltlog
// (the audit log), boltstore (the built-in tools' domain, and Open, the
// daemon's store), and bolttest (damage on purpose, for tests elsewhere).
//
// DB runs transactions of one type, *kv.Tx (a bbolt transaction with
// savepoints), which every bbolt store takes. Writes are group-committed
// (group.go), and every commit is fsynced before Update returns. Storage
// (OpenStorage, NewStorage) is the pipeline's Store[D] on a DB: each of
// its transactions binds the key store, the audit log and the domain
// store D to one *kv.Tx, and it gives a daemon readiness, the commits and
// the physical checks. It passes the conformance suite
// (storage/storetest).
//
// bbolt maps the file and trusts it: a truncated file or a damaged page
// faults (SIGBUS, SIGSEGV), which no recover can catch. So Open and
// OpenReadOnly first read the file with ReadAt and check it against its
// own meta pages (size, magic, version, checksums) and every page of its
// tree (file.go), and Open runs bbolt's own consistency check once mapped;
// a damaged file is a *DamagedError, one sentence naming the damage. On a
// database of 100k writes (303 MiB) the checks cost Open about 140 ms
// (BenchmarkStartup). Check runs bbolt's own consistency check and the
// idempotency index's, for Storage.Check and writerd check.
//
// A commit that fails is told apart by its cause (refuse.go). A full disk
// (ENOSPC or EDQUOT from writing a page or growing the file) is
// transient: the writes are answered UNAVAILABLE with FullMessage, Ready
// fails, and the next write that commits, or a probe of Ready that finds
// room past the data, ends it. Any other failure to write or sync the
// file poisons the store: no commit is attempted and no read served
// until it is opened again (DB.Poisoned, ErrPoisoned, PoisonedMessage),
// one error line is logged (SetLogger), and Lead reports false, so that
// no checkpoint is signed over events that may not be on the disk.
//
// A file another process holds is ErrLocked; the daemon's assembly
// (internal/daemon) answers calls UNAVAILABLE with HeldMessage meanwhile
// and opens the store as soon as it is free.
//
// Errors never carry the data directory's path: storage errors name the
// file as <data>/writerd.db (docs/DESIGN.md section 8), and unwrap to the
// original error.
//
// Caveats: bbolt allows one writer at a time and one process per file (an
// exclusive file lock); Open fails fast with ErrLocked if another process
// holds the file. The checks read the file as bbolt v1.5 lays it out.
package bolt
