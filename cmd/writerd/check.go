package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

// CheckCommand checks a database that no daemon holds.
type CheckCommand struct {
	Stdout, Stderr io.Writer

	store     storeFlags
	auditKey  string
	upstreams string
}

const checkUsage = `usage: writerd check [--data DIR | --store URL] [--audit-key FILE] [--upstreams FILE]

Checks the database in a data directory, or with --store a PostgreSQL
database (while replicas run), read-only (it creates and changes nothing),
and prints every problem it finds, one per line, then a summary. It exits
0 when the database is sound, 1 when it found a problem or could not check
(no database, or a writerd process holds the data directory's).

What it checks:

  - the file against its own meta pages (size, magic, version, checksums)
    and every page of its tree (each inside the file, of a valid type, its
    elements inside it): the damage that serve refuses at start-up;
  - bbolt's own consistency check (every page reachable once or free, keys
    in order);
  - the audit log: sequence numbers dense from 1, times in order; and as
    serve's self-check does, each event against the leaf check stored
    with it, in its place, the stored tree hashes against the events, and
    every checkpoint against the tree (with the log's key: found as serve
    finds it, or with --store the replicas' file --audit-key names); and
    that the log extends the last checkpoint the daemon signed, which it
    keeps beside the key (one per log), when that file is found: a log
    behind it is a backup, or a copy that a fork of one log under one key
    left behind (writerd help restore);
  - idempotency records: each points at its audit event, and each live
    record has exactly one event since it was created;
  - the domain: every project and record has the ok audit event of its
    current revision, and every ok event's write is present (or was
    deleted by a later delete event);
  - on PostgreSQL, instead of the file's checks: the schema's version, the
    log's head against its events (no gap in the numbers), the stored tree
    hashes against the tree's size, no checkpoint past the log;
  - with --upstreams FILE, the upstreams file, loaded exactly as serve
    loads it (its references resolved; no secret is ever printed): a file
    serve would refuse is one problem, the sentence serve says, naming
    the line and the key; and, once it loads, each write to an upstream
    still open in the store (pending, or of unknown outcome and not
    resolved) whose tool the file does not export: a tool removed while
    writes to it were in flight. Nothing can complete or re-drive such a
    pending write, so a takeover records it unknown; an unknown one must
    be looked up at the upstream that served it and resolved (writerd
    outcome resolve). check never starts a stdio upstream nor connects to
    one: what only the upstream's listing shows (a pin that no longer
    matches, a schema writerd cannot enforce) is found by serve, at start
    or at SIGHUP; an exported name that is one of writerd's own tools is
    a problem, in serve's sentence.

Each flag may also be set in the environment as WRITERD_<FLAG>.

Examples:

	# Check the default data directory:
	writerd check

	# Check a copy of a daemon's data directory while it runs:
	cp -a /var/lib/writerd /tmp/writerd-copy && writerd check --data /tmp/writerd-copy

	# Check the database replicas share:
	writerd check --store 'postgres://writerd@db.internal/writerd?sslmode=verify-full'

	# Check an edited upstreams file before SIGHUP puts it in force, with
	# the writes the replicas still have open:
	writerd check --store 'postgres://writerd@db.internal/writerd?sslmode=verify-full' --upstreams /etc/writerd/upstreams.toml

Flags:
`

// errProblems marks a check that printed its problems; the command exits 1
// without another word.
var errProblems = errors.New("problems found")

func (c *CheckCommand) flags() *flagSet {
	fs := newFlagSet("writerd check", checkUsage, c.Stdout, c.Stderr)
	c.store.define(fs)
	fs.StringVar(&c.auditKey, "audit-key", "", "the daemon's key `file` (--audit-key), to check the checkpoints with and find the last one it signed (default: found as serve finds it; none with --store)")
	fs.StringVar(&c.upstreams, "upstreams", "", "also check the upstreams `file` serve would load (--upstreams), and the open writes of tools it does not export")
	return fs
}

// Run parses the flags, checks the database and prints what it found.
func (c *CheckCommand) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := fs.parse(args); err != nil {
		return err
	}
	store, err := c.store.config(fs)
	if err != nil {
		return err
	}
	if c.auditKey != "" {
		if c.auditKey, err = fs.path("audit-key", c.auditKey); err != nil {
			return err
		}
	}
	// The upstreams file first, as serve reads it before the store: its
	// problem is printed whatever becomes of the store's checks.
	var up *upstream.Config
	var upProblems []error
	if c.upstreams != "" {
		if c.upstreams, err = fs.path("upstreams", c.upstreams); err != nil {
			return err
		}
		if up, err = loadUpstreams(c.upstreams); err == nil {
			if err = daemon.ClashWithOwnTools(up); err != nil {
				up = nil
			}
		}
		if err != nil {
			upProblems = append(upProblems, err)
			fmt.Fprintln(c.Stdout, err)
		}
	}
	s, err := daemon.OpenReadOnly(store)
	var damaged *daemon.DamagedError
	switch {
	case errors.Is(err, daemon.ErrHeld):
		return errors.New(store.Name() + " is in use by a running writerd process; stop it first, or check a copy of the data directory")
	case errors.Is(err, daemon.ErrNoStore):
		return errors.New("there is nothing to check: " + store.Absent())
	case errors.Is(err, daemon.ErrOldStore):
		return errors.New(store.Name() + " was written by an earlier writerd; start writerd serve on it once to convert it, then check it")
	case errors.As(err, &damaged):
		for _, p := range damaged.Problems {
			fmt.Fprintln(c.Stdout, p)
		}
		fmt.Fprintf(c.Stdout, "writerd check: %s: the file is damaged, so the checks that need it mapped did not run.\n", count(len(upProblems)+len(damaged.Problems), "problem"))
		return errProblems
	case err != nil:
		return c.store.namePath(fmt.Errorf("the store cannot be opened: %w", err))
	}
	defer s.Close()

	var problems []error
	for _, w := range daemon.Warnings(s) {
		problems = append(problems, errors.New(w))
	}
	checked, events, found, err := handlers.CheckStore(ctx, s, time.Now())
	if err != nil {
		return fmt.Errorf("the store cannot be read: %w", err)
	}
	problems = append(problems, found...)
	damage, err := c.checkLog(ctx, s, store)
	if err != nil {
		return fmt.Errorf("the store cannot be read: %w", err)
	}
	problems = append(problems, damage...)
	if up != nil {
		open, err := openWritesOfRemovedTools(ctx, s, up)
		if err != nil {
			return fmt.Errorf("the store cannot be read: %w", err)
		}
		problems = append(problems, open...)
	}
	what := checked + " and " + count(int(events), "audit event")
	switch {
	case up != nil:
		what = fmt.Sprintf("%s, %s and <upstreams> (%s, %s)", checked, count(int(events), "audit event"), count(len(up.Upstreams), "upstream"), count(upTools(up), "tool"))
	case c.upstreams != "":
		what = checked + ", " + count(int(events), "audit event") + " and <upstreams>"
	}
	const most = 1000
	for i, p := range problems {
		if i == most {
			fmt.Fprintf(c.Stdout, "… and %d more\n", len(problems)-most)
			break
		}
		fmt.Fprintln(c.Stdout, p)
	}
	if n := len(upProblems) + len(problems); n > 0 {
		fmt.Fprintf(c.Stdout, "writerd check: %s in %s.\n", count(n, "problem"), what)
		return errProblems
	}
	fmt.Fprintf(c.Stdout, "writerd check: no problems in %s.\n", what)
	return nil
}

// openWritesOfRemovedTools returns a problem for each write to an upstream
// still open in s (pending, or unknown and not resolved) whose tool up
// does not export: a tool the operator removed while writes to it were in
// flight. It reads the store's index of open writes, never every record.
func openWritesOfRemovedTools(ctx context.Context, s daemon.Store, up *upstream.Config) ([]error, error) {
	exported := map[string]bool{}
	for _, u := range up.Upstreams {
		for _, t := range u.Tools {
			exported[t.Export] = true
		}
	}
	var problems []error
	err := s.View(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		problems = problems[:0]
		return tx.Keys().Unsettled(func(r *idempotency.Record) error {
			switch {
			case exported[r.Tool]:
			case r.State == idempotency.Pending:
				problems = append(problems, fmt.Errorf("idempotency record %s/%s is a pending write of %s, which <upstreams> does not export: "+
					"nothing can complete or re-drive it, so the next takeover records its outcome unknown; export the tool again first to let writerd settle it",
					r.Principal, r.Key, r.Tool))
			default:
				problems = append(problems, fmt.Errorf("idempotency record %s/%s is a write of %s of unknown outcome, which <upstreams> does not export: "+
					"find at its upstream whether it took effect, then record that with writerd outcome resolve", r.Principal, r.Key, r.Tool))
			}
			return nil
		})
	})
	return problems, err
}

// upTools counts the tools up exports.
func upTools(up *upstream.Config) int {
	n := 0
	for _, u := range up.Upstreams {
		n += len(u.Tools)
	}
	return n
}

// checkLog runs the audit log's self-check over the whole log, as serve's
// background pass does, with the log's key and the checkpoint the daemon
// last signed where they are found: without the key, the checkpoints are
// not checked (a note says so), but the events and the stored hashes are.
func (c *CheckCommand) checkLog(ctx context.Context, s daemon.Store, store daemon.StoreConfig) ([]error, error) {
	keyFile, state := c.auditKey, ""
	switch {
	case keyFile != "":
		state = auditlog.StatePath(keyFile)
	case store.Exclusive():
		origin, err := daemon.StoreOrigin(ctx, s)
		if err != nil {
			return nil, err
		}
		var lerr error
		if keyFile, state, lerr = daemon.LocateKey(store.Data, "", origin); lerr != nil && origin != "" {
			fmt.Fprintf(c.Stderr, "writerd check: note: %v, so the checkpoints were not checked against it\n", lerr)
		}
	}
	lc := auditlog.LogCheck{}
	if keyFile != "" {
		var err error
		if lc.Key, err = keyFileVerifier(keyFile); err != nil {
			return nil, err
		}
		remembered, _, err := auditlog.ReadState(state, lc.Key)
		if err != nil {
			return []error{err}, nil
		}
		lc.Remembered = remembered
	}
	_, damage, err := lc.Run(ctx, pipeline.AuditStorage[handlers.Store](s))
	if damage != nil {
		return []error{damage}, err
	}
	return nil, err
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
