package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/pipeline/boltdb"
	"github.com/writerd/writerd/pipeline/boltdb/boltstore"
)

// CheckCommand checks a database that no daemon holds.
type CheckCommand struct {
	Stdout, Stderr io.Writer

	dataDir string
}

const checkUsage = `usage: writerd check [--data DIR]

Checks the database in a data directory, read-only (it creates and changes
nothing), and prints every problem it finds, one per line, then a summary.
It exits 0 when the database is sound, 1 when it found a problem or could
not check (no database, or a writerd process holds it).

What it checks:

  - the file against its own meta pages (size, magic, version, checksums)
    and every page of its tree (each inside the file, of a valid type, its
    elements inside it): the damage that serve refuses at start-up;
  - bbolt's own consistency check (every page reachable once or free, keys
    in order);
  - the audit log: sequence numbers dense from 1, times in order;
  - idempotency records: each points at its audit event, and each live
    record has exactly one event since it was created;
  - the domain: every project and record has the ok audit event of its
    current revision, and every ok event's write is present (or was
    deleted by a later delete event).

Each flag may also be set in the environment as WRITERD_<FLAG>.

Examples:

	# Check the default data directory:
	writerd check

	# Check a copy of a daemon's data directory while it runs:
	cp -a /var/lib/writerd /tmp/writerd-copy && writerd check --data /tmp/writerd-copy

Flags:
`

// errProblems marks a check that printed its problems; the command exits 1
// without another word.
var errProblems = errors.New("problems found")

func (c *CheckCommand) flags() *flagSet {
	fs := newFlagSet("writerd check", checkUsage, c.Stdout, c.Stderr)
	fs.dataDirFlag(&c.dataDir)
	return fs
}

// Run parses the flags, checks the database and prints what it found.
func (c *CheckCommand) Run(_ context.Context, args []string) error {
	fs := c.flags()
	if err := fs.parse(args); err != nil {
		return err
	}
	dir, err := fs.dataDir(c.dataDir)
	if err != nil {
		return err
	}
	db, err := boltdb.OpenReadOnly(dir)
	var damaged *boltdb.DamagedError
	switch {
	case errors.Is(err, boltdb.ErrLocked):
		return errors.New("<data>/" + boltdb.FileName + " is in use by a running writerd process; stop it first, or check a copy of the data directory")
	case errors.Is(err, boltdb.ErrNoDatabase):
		return errors.New("there is no database to check: <data>/" + boltdb.FileName + " does not exist")
	case errors.As(err, &damaged):
		for _, p := range damaged.Problems {
			fmt.Fprintln(c.Stdout, p)
		}
		fmt.Fprintf(c.Stdout, "writerd check: %s: the file is damaged, so the checks that need it mapped did not run.\n", count(len(damaged.Problems), "problem"))
		return errProblems
	case err != nil:
		return fmt.Errorf("the store cannot be opened: %w", err)
	}
	defer db.Close()

	var problems []error
	for _, w := range db.Warnings() {
		problems = append(problems, errors.New(w))
	}
	var pages int64
	var events int
	err = db.Bolt().View(func(tx *bolt.Tx) error {
		pages = tx.Size() / int64(db.Bolt().Info().PageSize)
		var errs []error
		errs, events = checkStore(tx)
		problems = append(problems, errs...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("the store cannot be read: %w", err)
	}
	const most = 1000
	for i, p := range problems {
		if i == most {
			fmt.Fprintf(c.Stdout, "… and %d more\n", len(problems)-most)
			break
		}
		fmt.Fprintln(c.Stdout, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(c.Stdout, "writerd check: %s in %s and %s.\n", count(len(problems), "problem"), count(int(pages), "page"), count(events, "audit event"))
		return errProblems
	}
	fmt.Fprintf(c.Stdout, "writerd check: no problems in %s and %s.\n", count(int(pages), "page"), count(events, "audit event"))
	return nil
}

// checkStore runs the checks of writerd check that read the database
// through bbolt: bbolt's own and the pipeline's invariants (boltdb.Check),
// then the domain store's against the audit log (boltstore.Check). It
// returns every problem, and the number of audit events read.
func checkStore(tx *bolt.Tx) ([]error, int) {
	problems := split(boltdb.Check(tx))
	events, err := boltstore.EventsOf(tx)
	if err != nil {
		return problems, len(events) // boltdb.Check named it
	}
	return append(problems, split(boltstore.Check(tx, events))...), len(events)
}

// split returns the errors joined in err, one per problem.
func split(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
