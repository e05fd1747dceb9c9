package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/atomicfile"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/pathless"
	"github.com/writerd/writerd/internal/shell"
	"github.com/writerd/writerd/pipeline"
)

// RestoreCommand is writerd restore: a backup put in place as a data
// directory's database, and the record of the last checkpoint signed for
// that log (and that log alone) set aside if the backup lacks it.
type RestoreCommand struct {
	Stdout, Stderr io.Writer

	data     string
	from     string
	auditKey string
}

const restoreUsage = `usage: writerd restore --from FILE [--data DIR] [--audit-key FILE]

Puts a backup (FILE, written by writerd backup) in place as the database
of the data directory DIR, with no daemon running on it, and handles the
record of the last checkpoint writerd signed for that log, and for that
log alone.

It first checks the backup whole, away from DIR: the file checks writerd
check makes, bbolt's consistency check, and its audit log against the
log's key (found as serve finds it, by the log's origin, or the file
--audit-key names). It refuses a backup that fails, one of another log
than the database it replaces, and a DIR a running writerd holds; then
nothing is changed. The backup is then renamed into place in one step
(DIR's database is at every moment the old one or the backup), and the
database it replaced is kept beside it as writerd.db.before-restore-TIME.

The daemon keeps, beside the log's key, the last checkpoint it signed
(<key>.last-checkpoint, one per log, by its origin), and refuses to start
on a log that does not extend it: a restored backup is such a log when a
checkpoint was signed after it. If the backup extends that checkpoint,
the record is kept. If not, it is set aside as
<key>.last-checkpoint.before-restore-TIME (the records of other logs in
the key directory are untouched), and the command says what it means:
the events signed after the backup are lost from this log, and auditors
and witnesses holding that checkpoint will see the restored log as a
fork of it once it grows.

A PostgreSQL store is restored with PostgreSQL's own tools.

Examples:

	# Restore last night's backup into the data directory of a stopped daemon:
	writerd restore --data /var/lib/writerd --from /var/backups/writerd/writerd.db

Flags:
`

func (c *RestoreCommand) flags() *flagSet {
	fs := newFlagSet("writerd restore", restoreUsage, c.Stdout, c.Stderr)
	fs.dataDirFlag(&c.data)
	fs.Lookup("data").Usage = "restore into this data `directory`, which no daemon may hold: an absolute path, or one starting with ~/"
	fs.StringVar(&c.from, "from", "", "the backup `file` to restore, as writerd backup wrote it (required)")
	fs.StringVar(&c.auditKey, "audit-key", "", "the log's key `file`, if the daemon is given one with --audit-key (default: found as serve finds it)")
	fs.env = map[string]bool{"data": true, "audit-key": true}
	return fs
}

// Run restores the backup.
func (c *RestoreCommand) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := fs.parse(args); err != nil {
		return err
	}
	if c.from == "" {
		return fs.fail("--from is required: the backup file to restore")
	}
	from, err := fs.path("from", c.from)
	if err != nil {
		return err
	}
	data, err := fs.dataDir(c.data)
	if err != nil {
		return err
	}
	if c.auditKey != "" {
		if c.auditKey, err = fs.path("audit-key", c.auditKey); err != nil {
			return err
		}
	}
	name := shell.Quote(c.from)
	fi, err := os.Stat(from)
	switch {
	case err != nil:
		return fmt.Errorf("cannot read the backup %s: %w", name, pathless.Error(err))
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a file: --from takes the backup file writerd backup wrote", name)
	}
	target := daemon.StoreFile(data)
	if same, _ := sameFile(from, target); same {
		return fmt.Errorf("%s is the database of the data directory it would be restored into; give a backup of it", name)
	}
	if held, err := daemon.HeldFile(from); err == nil && held {
		return fmt.Errorf("%s is the database of a running writerd process, not a backup; back it up with writerd backup --server", name)
	}
	dbName := shell.Quote(target)

	// The database it replaces: which log it is, and that no daemon
	// holds it. One too damaged to read is replaced all the same.
	oldOrigin, hasOld := "", false
	store := daemon.StoreConfig{Data: data}
	old, err := daemon.OpenReadOnly(store)
	switch {
	case errors.Is(err, daemon.ErrHeld):
		return fmt.Errorf("%s is held by a running writerd process; stop it first, then restore (nothing was changed)", dbName)
	case errors.Is(err, daemon.ErrNoStore):
	case err != nil:
		hasOld = true
		fmt.Fprintf(c.Stderr, "writerd restore: note: the database it replaces cannot be read (%v), so which log it holds is not known\n", err)
	default:
		hasOld = true
		oldOrigin, err = daemon.StoreOrigin(ctx, old)
		old.Close()
		if err != nil {
			return fmt.Errorf("the database %s cannot be read: %w", dbName, err)
		}
	}

	// The backup, copied beside the database into a directory of its own
	// and checked there: whole, of which log, its log against the key and
	// the record of the last checkpoint signed.
	if err := os.MkdirAll(data, 0o700); err != nil {
		return fmt.Errorf("cannot create the data directory %s: %w", shell.Quote(data), pathless.Error(err))
	}
	stage, err := os.MkdirTemp(data, ".restore-")
	if err != nil {
		return fmt.Errorf("cannot write in the data directory %s: %w", shell.Quote(data), pathless.Error(err))
	}
	defer os.RemoveAll(stage)
	staged := daemon.StoreFile(stage)
	if err := copyFile(from, staged); err != nil {
		return fmt.Errorf("cannot copy the backup %s into the data directory: %w", name, pathless.Error(err))
	}
	info, err := daemon.CheckBackup(staged)
	var damaged *daemon.DamagedError
	switch {
	case errors.As(err, &damaged):
		return fmt.Errorf("%s is not a whole writerd database (%s), so nothing was changed", name, damaged.Problems[0])
	case err != nil:
		return fmt.Errorf("%s cannot be checked (%v), so nothing was changed", name, pathless.Error(err))
	}
	plan, err := c.checkLog(ctx, stage, data, oldOrigin, info.Events)
	if err != nil {
		return err
	}

	// In place: the old database held, so that no daemon opens it
	// meanwhile; kept under another name; the backup renamed over it.
	release, err := daemon.HoldFile(target)
	switch {
	case errors.Is(err, daemon.ErrHeld):
		return fmt.Errorf("%s is held by a running writerd process; stop it first, then restore (nothing was changed)", dbName)
	case err != nil:
		return fmt.Errorf("cannot lock %s: %w", dbName, pathless.Error(err))
	}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	kept := target + ".before-restore-" + stamp
	if hasOld {
		if err := os.Link(target, kept); err != nil {
			release()
			return fmt.Errorf("cannot keep the database it replaces as %s (%v), so nothing was changed", shell.Quote(kept), pathless.Error(err))
		}
	}
	err = os.Rename(staged, target)
	release()
	if err != nil {
		os.Remove(kept)
		return fmt.Errorf("cannot put the backup in place as %s (%v), so nothing was changed", dbName, pathless.Error(err))
	}
	if err := atomicfile.SyncDir(data); err != nil {
		return fmt.Errorf("put the backup in place as %s, but the data directory cannot be synced, so the rename may not survive a crash: %w", dbName, pathless.Error(err))
	}
	replaced := "; the database it replaced is kept as " + shell.Quote(kept)
	if !hasOld {
		replaced = ""
	}
	fmt.Fprintf(c.Stdout, "writerd restore: put %s in place as %s: %s of the log %s, checked whole%s.\n",
		name, dbName, count(int(info.Events), "audit event"), plan.origin, replaced)
	return c.record(plan, info.Events, stamp)
}

// restorePlan is what the backup's check found of the record of the last
// checkpoint signed for its log.
type restorePlan struct {
	origin string
	state  string                // the record's file; "" if there is no place for one
	signed *auditlog.Checkpoint  // the record's checkpoint; nil if none
	lacks  *auditlog.DamageError // why the backup does not extend it; nil if it does
}

// checkLog checks the staged backup's audit log, in the directory stage,
// with the log's key and against the record of the last checkpoint signed
// for it; a log of another origin than the database it replaces, a key
// not found, or a log that fails its check is refused.
func (c *RestoreCommand) checkLog(ctx context.Context, stage, data, oldOrigin string, events uint64) (restorePlan, error) {
	s, err := daemon.OpenReadOnly(daemon.StoreConfig{Data: stage})
	if err != nil {
		return restorePlan{}, fmt.Errorf("the backup cannot be opened (%v), so nothing was changed", err)
	}
	defer s.Close()
	origin, err := daemon.StoreOrigin(ctx, s)
	if err != nil {
		return restorePlan{}, fmt.Errorf("the backup cannot be read (%v), so nothing was changed", err)
	}
	p := restorePlan{origin: origin}
	if oldOrigin != "" && origin != oldOrigin {
		return p, fmt.Errorf("the backup holds the log %s, but the data directory holds the log %s: restore a backup into the data directory of its own log, or move that database away first (nothing was changed)", origin, oldOrigin)
	}
	if origin == "" && events == 0 && c.auditKey == "" {
		return p, nil // an empty log not yet named: no key, no record
	}
	keyFile := c.auditKey
	if keyFile != "" {
		p.state = auditlog.StatePath(keyFile)
	} else if keyFile, p.state, err = daemon.LocateKey(data, "", origin); err != nil {
		return p, fmt.Errorf("%v: put the log's key back first (from its own backup), or give its file with --audit-key; nothing was changed", err)
	}
	key, err := keyFileVerifier(keyFile)
	if err != nil {
		return p, err
	}
	remembered, cp, err := auditlog.ReadState(p.state, key)
	if err != nil {
		return p, fmt.Errorf("%w; nothing was changed", err)
	}
	p.signed = cp
	_, damage, err := auditlog.LogCheck{Key: key, Remembered: remembered}.Run(ctx, pipeline.AuditStorage[handlers.Store](s))
	switch {
	case err != nil:
		return p, fmt.Errorf("the backup's audit log cannot be read (%v), so nothing was changed", err)
	case damage != nil && !damage.Forked():
		return p, fmt.Errorf("the backup's audit log fails its check, so nothing was changed: %v", damage)
	}
	p.lacks = damage
	return p, nil
}

// record keeps, or sets aside, the record of the last checkpoint signed
// for the restored log, and says what its loss means.
func (c *RestoreCommand) record(p restorePlan, events uint64, stamp string) error {
	switch {
	case p.signed == nil:
		fmt.Fprintf(c.Stdout, "No checkpoint is recorded as signed for this log, so none is lost; the daemon signs on from the backup's latest checkpoint.\n")
		return nil
	case p.lacks == nil:
		fmt.Fprintf(c.Stdout, "The backup holds the last checkpoint writerd signed for this log (of %s), so nothing signed is lost; its record %s is kept.\n",
			count(int(p.signed.Size), "event"), shell.Quote(p.state))
		return nil
	}
	aside := p.state + ".before-restore-" + stamp
	if err := os.Rename(p.state, aside); err != nil {
		return fmt.Errorf("the backup is in place, but the record of the last checkpoint signed for its log cannot be set aside (%v), so the daemon refuses to start on it: move %s aside yourself", pathless.Error(err), shell.Quote(p.state))
	}
	if err := atomicfile.SyncDir(filepath.Dir(p.state)); err != nil {
		return fmt.Errorf("set aside %s, but its directory cannot be synced: %w", shell.Quote(p.state), pathless.Error(err))
	}
	lost := fmt.Sprintf("Events %d to %d, and any after them, were signed after the backup and are lost from this log", events+1, p.signed.Size)
	if events+1 == p.signed.Size {
		lost = fmt.Sprintf("Event %d, and any after it, was signed after the backup and is lost from this log", events+1)
	}
	if p.lacks.Size >= p.signed.Size {
		lost = fmt.Sprintf("The backup's log is not the one that checkpoint signed (%s): the events that checkpoint signed past the point where they part are lost from this log", p.lacks.Problem.Detail)
	}
	fmt.Fprintf(c.Stdout, `The last checkpoint writerd signed for this log is of %s, which the backup (%s) does not extend. Its record is set aside as %s, for this log alone (the records of other logs beside it are untouched), so that the daemon starts on the backup. What that means:
  - %s: the writes they record are undone, and an idempotency key first used by one of them is new again, so a retry of such a call runs again.
  - Auditors and witnesses holding that checkpoint, or any other over more than %s, will see the restored log as a fork of it once it grows past event %d: writerd audit verify --against that checkpoint reports it as not an extension, and a witness refuses to cosign the restored log's checkpoints.
  - The record set aside says how far the log had gone: keep it.
`, count(int(p.signed.Size), "event"), count(int(events), "event"), shell.Quote(aside), lost, count(int(events), "event"), events)
	return nil
}

// copyFile copies the file from to a new file to (mode 0600), whole and
// synced, or not at all (internal/atomicfile).
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := atomicfile.New(to, 0o600)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := io.Copy(f, in); err != nil {
		return err
	}
	return f.Commit()
}
