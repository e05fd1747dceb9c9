// Package groupcommit is the group commit both backends share: one
// queue of writes, and one loop that takes from it as many as wait, up
// to a bound, and hands them as one batch to the backend's Commit, which
// runs them in one transaction (bbolt's, one fsync; PostgreSQL's, one
// COMMIT) and answers each.
//
// The loop: it waits for a write; takes, without waiting, every write
// queued behind it up to the bound; calls Commit with the batch, in
// arrival order; forgets the batch (a write holds what its transaction
// read or wrote until overwritten); and goes round. There is no timer: a
// lone write commits at once, and the writes that arrive while a commit
// is in flight make the next batch, so every sync is shared by as many
// writes as arrived while the last one ran, and none waits for company
// that may not come. The bound caps what one transaction holds: bbolt's
// 256, PostgreSQL's 60 (its savepoints are subtransactions, of which it
// caches 64 per backend).
// The queue holds one bound's worth; a writer past it waits to enter.
//
// What is the backend's is its Commit: its transaction, a savepoint per
// write, and the outcome of each (bbolt: the full-disk probe, and the
// poisoning after a failed write or sync; PostgreSQL: the write that met
// a lock, run again alone, and the batch refused at its seal by the audit
// log's cut, run again).
// Commit may return writes for the next batch, which the loop puts first,
// in their order (PostgreSQL's writes of a refused batch); and it may hand
// a write to Go, to be answered on a goroutine of its own (PostgreSQL's
// write run alone), which the loop waits for before it reports itself
// stopped.
// Run runs one write, and is the one place a write's panic becomes its
// error (pipeline.PanicError): the write's changes are the backend's to
// roll back to its savepoint, and its neighbours run on.
//
// Observer holds the function a backend tells of each commit that
// succeeds (its ObserveCommits), which may be set while commits run.
//
// Stop ends the loop after the batch in flight: the writes still queued,
// and those Commit returned for the next batch, are answered with the
// closed error given to Start, and so is every write submitted after it.
//
// A write whose caller went away (its context ended) before it ran is
// answered pipeline.Cancelled and never runs: Submit answers so a write
// whose context ended before it was queued, and the backend's commit one
// whose context ended before its turn in its batch came (Unit.Gone). A
// write that began to run completes whatever its caller does: the write
// is the store's from then on. Hooks, carried by a write's context, let a
// test end it at each of these points.
//
// Caveats: a write once queued is answered whatever its caller's context
// does, since it may be committed meanwhile. Commit runs on the loop's one
// goroutine: a commit that blocks holds every write behind it. Once Stop
// is called the loop may still take one more batch from the queue before
// it sees the stop (it prefers neither). The package is for storage/'s
// backends only, and imports no driver.
package groupcommit
