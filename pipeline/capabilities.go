package pipeline

import (
	"context"
	"io"
	"log/slog"
	"time"
)

// The capabilities a store may have beyond Store[D], each a named
// interface that the one assembly (internal/daemon) asks for by type
// assertion, so that no code asks which backend it runs on: a store says
// what it can do (docs/DESIGN.md section 13, "Adding a backend"). What a
// store lacks is never assumed: a store without Leader signs nothing.
// RunningKeys, a capability of a store's Keys, is in outcome.go.

// Leader is a store whose audit log this process may sign: Lead reports
// whether it signs checkpoints and sends them to witnesses now. A store
// one process holds leads while it takes writes (bbolt: unless a failed
// commit poisoned it); a store replicas share elects one at a time
// (PostgreSQL: a session advisory lock). Every backend implements it: a
// store that does not is never taken to lead, so its log is never signed
// and nothing is sent to witnesses, and the daemon logs why.
type Leader interface {
	Lead(ctx context.Context) bool
}

// WriteProber is a store that can show, writing nothing, that a write
// could commit now, for /readyz, beyond what its Ready tells (bbolt's
// Ready is such a probe already: an empty unit through its group commit,
// its turn and its fsync). PostgreSQL takes the audit log's sequencer
// shared, as every write's commit does, and lets it go. ProbeWrite returns by ctx's
// deadline; its error is UNAVAILABLE with a sentence for the caller.
type WriteProber interface {
	ProbeWrite(ctx context.Context) error
}

// LogSetter is a store with log lines of its own (bbolt: the one line of
// a store that stops taking writes after a disk error), given the
// daemon's logger once it opens.
type LogSetter interface {
	SetLogger(*slog.Logger)
}

// Warner is a store that found damage it works around when it opened
// (bbolt: one bad meta page), each a phrase without a path, for the log
// and writerd check.
type Warner interface {
	Warnings() []string
}

// DiskUser is a store that can tell its size on disk: the file, the bytes
// it uses of it, and those of each part (bbolt: each top-level bucket), by
// name, for writerd bench and check.
type DiskUser interface {
	DiskUsage() (file, used int64, parts map[string]int64, err error)
}

// Backuper is a store that writes a consistent copy of itself while it
// serves (bbolt: one read transaction, the file a daemon can start on). It
// calls begin with the copy's size before it writes any of it to the
// writer begin returns. A store without it is backed up with its
// database's own tools.
type Backuper interface {
	Backup(ctx context.Context, begin func(size int64) (io.Writer, error)) (int64, error)
}

// Exclusive is a store that only one process opens at a time (bbolt: its
// file lock): a pending record it holds when it opens belongs to no live
// process, so the daemon takes every one over at start (Pipeline.RunTakeovers),
// not only those past their lease.
type Exclusive interface {
	Exclusive() bool
}

// Replicas is a store that tells which processes serve on it, and with
// which config (docs/OPERATIONS.md, "Replicas and their configs"): each
// says so when it starts, on each reload of its upstreams file and as a
// heartbeat (Seen), and Replicas lists those seen lately, for /readyz and
// a metric. A store replicas share keeps the list in the database, on the
// server's clock, so that replicas' clocks do not skew it (PostgreSQL);
// a store one process holds knows only that process, in memory (bbolt).
// A store without it is taken for a replica alone.
type Replicas interface {
	// Seen records that the replica id serves with the config digest
	// config, now; it replaces what id said before.
	Seen(ctx context.Context, r Replica) error
	// Replicas returns the replicas seen within the last within, by id.
	Replicas(ctx context.Context, within time.Duration) ([]Replica, error)
}

// Replica is one process serving on a store: its id (the owner name of
// the pending records it writes), where it runs (host and process id),
// the digest of the upstreams file it serves ("" for none), and when it
// was last seen.
type Replica struct {
	ID, Host, Config string
	SeenAt           time.Time
}
