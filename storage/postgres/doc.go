// Package postgres is writerd's PostgreSQL backend: the store of the built-in
// tools on one database, which any number of writerd processes (replicas)
// share, keeping every promise one process on bbolt keeps
// (docs/DESIGN.md section 13, and the schema in section 14).
//
// Open connects a pool, applies the embedded migrations under an advisory
// lock, and returns a pipeline.Store. It passes the conformance suite
// (storage/storetest).
//
//   - Keys across replicas: a write claims its key with a
//     transaction-scoped advisory lock, then reads the key's record, so
//     that a call with the key on another replica waits for the first and
//     is answered from its record, and runs itself if the first one's
//     transaction dies (the server releases its locks).
//   - One audit log, sequenced apart from its writes (sequencer.go): a
//     write's transaction queues its event under its final id, and seals
//     its commit in the COMMIT's own message; an integrator on each
//     replica moves the cut and numbers the queued events in id order,
//     with their tree hashes, shortly after. No write holds a lock every
//     write needs across a wait for its replica.
//   - The domain's rules are the database's: a unique index on a name's
//     comparison key, a foreign key from a record to its project, row
//     locks on what a write reads.
//   - Group commit per replica (group.go): the writes that arrive together
//     share a transaction, each behind a savepoint; a write that would
//     wait on another transaction is run again alone, and a batch whose
//     seal the cut refused runs again with new ids.
//
// Errors hold no address, user, password or value a caller sent: the
// SQLSTATE and the constraint, or the kind of a connection's failure. A
// server that cannot be reached, a lost connection, a restart or a full
// disk is UNAVAILABLE (retry same_key); a COMMIT whose connection died
// has an unknown outcome, answered the same, which the key decides.
//
// Caveats: an event is in the log shortly after its write is answered
// (1.1s at most with no reader; a reader through the daemon integrates
// first); a read-only store does not integrate. With streaming replication, a checkpoint must only cover
// commits a synchronous standby has confirmed, or a failover can fork the
// log; run with synchronous_commit = on and synchronous_standby_names
// set, or sign no checkpoint on a primary whose standby lags.
package postgres
