package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/internal/atomicfile"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/loopback"
	"github.com/writerd/writerd/internal/pathless"
	"github.com/writerd/writerd/internal/shell"
	"github.com/writerd/writerd/pipeline"
)

// BackupCommand is writerd backup: a consistent copy of a bbolt store,
// from a running daemon or a data directory no daemon holds, written to
// a file whole or not at all.
type BackupCommand struct {
	Stdout, Stderr io.Writer

	server    string
	store     storeFlags
	tokenFile string
	out       string
}

const backupUsage = `usage: writerd backup -o FILE [--server URL [--token-file FILE] | --data DIR]

Writes a consistent copy of the store to FILE: the database as it stood
when the copy began, holding every write acknowledged before then, taken
while writes go on. From a running daemon (--server), with a token that
has the admin scope (a backup holds every record, more than the audit
scope may read); or from a data directory (--data, the default) when no
daemon holds it.

FILE is written whole or not at all: the copy goes to a temporary file
beside it (mode 0600), which must hold the size the daemon announced and
pass the checks writerd check makes of a file before it maps it (its
meta pages, every page of its tree) and bbolt's consistency check; only
then is it synced and renamed to FILE. A copy cut short (the daemon
stopped, the connection lost) or damaged leaves FILE as it was, and the
command says so and exits 1.

FILE is a writerd database: named writerd.db in a directory of its own,
writerd check, the audit commands and writerd serve take that directory
with --data (check it with --audit-key and the log's verifier key, or
check holds it to the checkpoint the daemon signed last, after the
backup). The audit log's signing key is not in it: it stays in the key
directory. To restore: stop the daemon, run writerd restore --data DIR
--from FILE, which puts FILE in place as <data>/writerd.db and sets aside
the record of the last checkpoint signed for that log alone
(<key>.last-checkpoint, beside the key) if FILE lacks it, and start the
daemon (README.md, "Backing up").

A PostgreSQL store (--store) is backed up with PostgreSQL's own tools
(pg_dump, or a base backup with WAL archiving), not with writerd backup.

Examples:

	# A token for backups, with the admin scope only (then SIGHUP the daemon):
	writerd token new --tokens /etc/writerd/tokens.json --name backup --scopes admin > /etc/writerd/backup.token

	# Back up a running daemon:
	writerd backup --server http://127.0.0.1:7070 --token-file /etc/writerd/backup.token -o /var/backups/writerd/writerd.db

	# Back up the data directory of a stopped daemon:
	writerd backup --data /var/lib/writerd -o /var/backups/writerd/writerd.db

Flags:
`

func (c *BackupCommand) flags() *flagSet {
	fs := newFlagSet("writerd backup", backupUsage, c.Stdout, c.Stderr)
	fs.StringVar(&c.out, "o", "", "write the backup to this `file`, replaced whole once the copy is complete and checked (required)")
	fs.StringVar(&c.server, "server", "", "back up the running daemon at this `URL`, such as http://127.0.0.1:7070")
	fs.StringVar(&c.tokenFile, "token-file", "", "with --server: the `file` holding the bearer token (it needs the admin scope); without it, $WRITERD_TOKEN")
	c.store.define(fs)
	fs.Lookup("data").Usage = "back up the store in this data `directory`, which no daemon may hold: an absolute path, or one starting with ~/"
	fs.Lookup("store").Usage = "a PostgreSQL database's `URL`, which writerd does not back up: given, the command says how to (pg_dump)"
	fs.env = map[string]bool{"server": true, "data": true, "store": true, "store-password-file": true, "token-file": true}
	return fs
}

// Run takes the backup and writes it to -o.
func (c *BackupCommand) Run(ctx context.Context, args []string) error {
	fs := c.flags()
	if err := fs.parse(args); err != nil {
		return err
	}
	if c.out == "" {
		return fs.fail("-o is required: the file to write the backup to")
	}
	out, err := filepath.Abs(expandHome(c.out))
	if err != nil {
		return fmt.Errorf("cannot resolve the backup's file name: %w", err)
	}
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		return fs.fail("-o names a directory; name the backup's file in it, such as %s", shell.Quote(filepath.Join(c.out, "writerd.db")))
	}
	remote, err := c.remote(fs)
	if err != nil {
		return err
	}
	var server *url.URL
	var store daemon.StoreConfig
	if remote {
		server, err = url.Parse(c.server)
		if err != nil || (server.Scheme != "http" && server.Scheme != "https") || server.Host == "" || server.RawQuery != "" || server.Fragment != "" || server.User != nil {
			return fs.fail("%s takes the daemon's URL, such as http://127.0.0.1:7070", fs.label("server"))
		}
	} else if store, err = c.store.config(fs); err != nil {
		return err
	}
	held, err := daemon.HeldFile(out)
	switch {
	case err != nil:
		return fmt.Errorf("cannot read %s: %w", shell.Quote(c.out), pathless.Error(err))
	case held:
		return fmt.Errorf("%s is the database of a running writerd process; write the backup to another file", shell.Quote(c.out))
	}
	w := &backupFile{path: out, name: shell.Quote(c.out)}
	defer w.abandon()
	if remote {
		err = c.fromServer(ctx, server, w)
	} else {
		err = c.fromData(ctx, store, w)
	}
	if err != nil {
		return err
	}
	info, err := w.commit()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "writerd backup: wrote %s: %s, holding %s, checked whole; restore it as %s with the daemon stopped\n",
		w.name, sizeText(info.Size), count(int(info.Events), "audit event"), daemon.StoreConfig{}.Name())
	return nil
}

// remote reports whether the backup is taken from a daemon: --server
// given, unless --data or --store was given on the command line while
// --server came from the environment. Both on the command line, or both
// from the environment, is a usage error.
func (c *BackupCommand) remote(fs *flagSet) (bool, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["server"] {
		if givenFlag(fs, "token-file") {
			return false, fs.fail("--token-file is for --server; a data directory is read without a token")
		}
		return false, nil
	}
	local := false
	for _, name := range []string{"data", "store"} {
		if set[name] && fs.fromEnv["server"] == fs.fromEnv[name] {
			return false, fs.fail("%s and %s each name the store to back up; give one of them", fs.label("server"), fs.label(name))
		}
		local = local || set[name] && !fs.fromEnv[name]
	}
	return !local, nil
}

// fromData copies a data directory's store that no daemon holds.
func (c *BackupCommand) fromData(ctx context.Context, store daemon.StoreConfig, w *backupFile) error {
	s, err := daemon.OpenReadOnly(store)
	var damaged *daemon.DamagedError
	switch {
	case errors.Is(err, daemon.ErrHeld):
		return errors.New(store.Name() + " is held by a running writerd process, so it cannot be copied from the data directory; back it up through that daemon with --server URL and a token with the admin scope")
	case errors.Is(err, daemon.ErrNoStore):
		return errors.New("there is nothing to back up: " + store.Absent())
	case errors.Is(err, daemon.ErrOldStore):
		return errors.New(store.Name() + " was written by an earlier writerd; start writerd serve on it once to convert it, then back it up")
	case errors.As(err, &damaged):
		return fmt.Errorf("%w; run writerd check --data DIR to list the damage", err)
	case err != nil:
		return fmt.Errorf("the store cannot be opened: %w", err)
	}
	defer s.Close()
	if _, ok := s.(pipeline.Backuper); !ok {
		return errors.New("writerd does not back up a PostgreSQL store: back it up with PostgreSQL's own tools (pg_dump, or a base backup with WAL archiving)")
	}
	if same, _ := sameFile(daemon.StoreFile(store.Data), w.path); same {
		return fmt.Errorf("%s is the database --data names; write the backup to another file", w.name)
	}
	n, err := daemon.Backup(ctx, s, w.begin)
	if err != nil {
		return w.failed(n, err)
	}
	return nil
}

// fromServer streams the backup from a daemon's GET /v1/admin/backup.
func (c *BackupCommand) fromServer(ctx context.Context, u *url.URL, w *backupFile) error {
	token := os.Getenv("WRITERD_TOKEN")
	if c.tokenFile != "" {
		b, err := os.ReadFile(expandHome(c.tokenFile))
		if err != nil {
			return fmt.Errorf("cannot read the token file: %w", pathless.Error(err))
		}
		token = string(b)
	}
	token = strings.TrimSpace(token)
	if strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return errors.New("the token holds spaces or control characters: it is not a writerd token")
	}
	if token != "" && u.Scheme == "http" && !loopback.Host(u.Hostname()) {
		fmt.Fprintf(c.Stderr, "writerd backup: warning: the token, and the backup, go to and from %s over plain HTTP, readable on the way; use https\n", u.Host)
	}
	n, err := httpapi.FetchBackup(ctx, u, token, w.begin)
	switch {
	case err == nil:
		return nil
	case w.f == nil && ctx.Err() != nil:
		return fmt.Errorf("the backup was interrupted, so %s was not written", w.name)
	}
	return w.failed(n, err)
}

// backupFile is the temporary file a backup is written to, beside the
// file it becomes once it is complete and checked.
type backupFile struct {
	path string // -o, absolute
	name string // -o as given, for messages
	size int64  // announced; 0 if unknown
	f    *atomicfile.File
}

// begin creates the temporary file, for a copy of size bytes.
func (w *backupFile) begin(size int64) (io.Writer, error) {
	f, err := atomicfile.New(w.path, 0o600) // whatever the umask
	if err != nil {
		return nil, fmt.Errorf("cannot write the backup beside %s: %w", w.name, pathless.Error(err))
	}
	w.f, w.size = f, size
	return f, nil
}

// failed is the error of a copy that ended after n bytes: one sentence
// saying FILE was not written.
func (w *backupFile) failed(n int64, err error) error {
	if w.f == nil {
		return err // nothing was begun: the store's or the daemon's own sentence
	}
	got := fmt.Sprintf("%d bytes", n)
	if w.size > 0 {
		got = fmt.Sprintf("%d of %d bytes", n, w.size)
	}
	var pe *os.PathError
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("the backup was interrupted after %s, so %s was not written", got, w.name)
	case errors.As(err, &pe) && pe.Path == w.f.Name():
		return fmt.Errorf("cannot write the backup beside %s (%v), so it was not written", w.name, pe.Err)
	}
	return fmt.Errorf("the backup was cut short after %s (the daemon stopped or the connection was lost: %v), so %s was not written; take it again", got, pathless.Error(err), w.name)
}

// commit checks the temporary file, syncs it and renames it over -o,
// then syncs the directory, so that -o is the whole backup or what it
// was before.
func (w *backupFile) commit() (daemon.BackupFile, error) {
	if err := w.f.Close(); err != nil { // synced, not yet renamed
		return daemon.BackupFile{}, fmt.Errorf("cannot write the backup beside %s: %w", w.name, pathless.Error(err))
	}
	info, err := daemon.CheckBackup(w.f.Name())
	var damaged *daemon.DamagedError
	switch {
	case errors.As(err, &damaged):
		return info, fmt.Errorf("the copy received is not a whole writerd database (%s), so %s was not written; take the backup again", damaged.Problems[0], w.name)
	case err != nil:
		return info, fmt.Errorf("the copy received cannot be checked (%v), so %s was not written", pathless.Error(err), w.name)
	}
	if w.size > 0 && info.Size != w.size {
		return info, fmt.Errorf("the copy received holds %d bytes, not the %d announced, so %s was not written; take the backup again", info.Size, w.size, w.name)
	}
	if err := w.f.Commit(); err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Op == "syncdir" {
			return info, fmt.Errorf("wrote %s, but its directory cannot be synced, so the file may not survive a crash: %w", w.name, pathless.Error(err))
		}
		return info, fmt.Errorf("cannot write %s: %w", w.name, pathless.Error(err))
	}
	return info, nil
}

// abandon removes the temporary file of a backup that was not committed.
func (w *backupFile) abandon() {
	if w.f != nil {
		w.f.Abort() // nothing once committed
	}
}

// sameFile reports whether two paths name one existing file.
func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// sizeText writes a size in bytes as a person reads it.
func sizeText(b int64) string {
	switch {
	case b >= 1<<30:
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + " GiB"
	case b >= 1<<20:
		return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB"
	case b >= 1<<10:
		return strconv.FormatFloat(float64(b)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return fmt.Sprintf("%d bytes", b)
}
