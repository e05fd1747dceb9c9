package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/daemon"
)

// forkWords are the words that name a copy served beside its original,
// at start-up and in writerd check.
const forkWords = "it is a fork of one log under one key (a backup or copy served beside its original"

// mustStdioWrites starts a daemon on s over stdio, creates one project
// for each key, and stops it, which signs the last checkpoint.
func mustStdioWrites(t *testing.T, s testStore, keys ...string) {
	t.Helper()
	d := mustStartWith(t, daemonConfig{store: s})
	for _, k := range keys {
		mustSucceed(t, d.Call("create_project", fmt.Sprintf(`{"idempotency_key":%q,"name":%q}`, k, k)))
	}
	d.Stop()
}

// Ensure a copy of a data directory served beside its original, which
// then signs past it, is named for what it is, a fork of one log under one
// key, rather than as events missing: the untouched original refuses to
// start saying so, and writerd check on it says so too (while writerd
// audit verify, which knows no record of what was signed, passes).
func TestFork_CopyServedBesideItsOriginal(t *testing.T) {
	orig := testStore{Dir: t.TempDir()}
	mustStdioWrites(t, orig, "fork-key-0001", "fork-key-0002", "fork-key-0003") // signs 3 at the stop
	cp := mustCopyStore(t, orig)                                                // one machine, one key directory
	mustStdioWrites(t, cp, "fork-key-0004", "fork-key-0005")                    // signs 5 at the stop

	mustVerifyPasses(t, orig.auditFlags()...)
	r := mustRunWith(t, runConfig{env: orig.env(t)}, append([]string{"serve", "--stdio"}, orig.serveFlags()...)...)
	mustNotFault(t, r.stderr)
	if r.code != 1 || !strings.Contains(r.stderr, "behind the checkpoint signed last for its origin") || !strings.Contains(r.stderr, forkWords) ||
		!strings.Contains(r.stderr, "writerd restore") || strings.Contains(r.stderr, "run writerd audit verify") {
		t.Errorf("serve on the original: exit %d, want 1 naming the fork:\n%s", r.code, r.stderr)
	}
	t.Logf("serve: %s", strings.TrimSpace(r.stderr))
	c := mustRunWith(t, runConfig{env: orig.env(t)}, append([]string{"check"}, orig.auditFlags()...)...)
	if c.code != 1 || !strings.Contains(c.stdout, forkWords) {
		t.Errorf("check on the original: exit %d, want 1 naming the fork:\n%s%s", c.code, c.stdout, c.stderr)
	}
	t.Logf("check: %s", strings.TrimSpace(c.stdout))
	mustCheck(t, cp) // the copy is the log its record signed
}

// Ensure writerd restore puts a backup of one of three data directories,
// whose logs' keys share the key directory, in place and sets aside the
// record of the last checkpoint signed for that log alone: it refuses
// while a daemon holds the directory, then restores, keeps the database it
// replaced, says what the checkpoint the backup lacks means; the other two
// logs' records are unchanged byte for byte and their daemons start; the
// restored directory checks clean, serves the backup and takes writes.
func TestRestore_OneOfThreeDataDirectories(t *testing.T) {
	dirs := []testStore{{Dir: t.TempDir()}, {Dir: t.TempDir()}, {Dir: t.TempDir()}}
	for i, s := range dirs {
		mustStdioWrites(t, s, fmt.Sprintf("dir%d-key-0001", i), fmt.Sprintf("dir%d-key-0002", i)) // each signs 2
	}
	backup := filepath.Join(t.TempDir(), "writerd.db")
	mustRunOK(t, runConfig{env: dirs[0].env(t)}, "backup", "--data", dirs[0].Dir, "-o", backup)
	mustStdioWrites(t, dirs[0], "dir0-key-0003", "dir0-key-0004") // signs 4, past the backup
	mustStdioWrites(t, dirs[1], "dir1-key-0003")
	mustStdioWrites(t, dirs[2], "dir2-key-0003")

	keys := dirs[0].keyDir(t)
	records := map[string]string{}
	for _, n := range names(t, keys) {
		if strings.HasSuffix(n, ".last-checkpoint") {
			records[n] = mustReadFile(t, filepath.Join(keys, n))
		}
	}
	if len(records) != 3 {
		t.Fatalf("the key directory holds %v, want three keys and their records", names(t, keys))
	}
	origin := func(s testStore) string {
		st := MustOpenStore(t, s)
		defer st.s.Close()
		o, err := daemon.StoreOrigin(context.Background(), st.s)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	restored := filepath.Base(auditlog.StatePath(auditlog.KeyPath(keys, origin(dirs[0]))))

	// Held by a daemon: refused, nothing changed.
	d := MustStartHTTP(t, httpConfig{store: dirs[0]})
	r := mustRunWith(t, runConfig{env: dirs[0].env(t)}, "restore", "--data", dirs[0].Dir, "--from", backup)
	if r.code != 1 || !strings.Contains(r.stderr, "is held by a running writerd process; stop it first") {
		t.Errorf("restore into a held directory: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if code := d.Stop(); code != 0 {
		t.Fatalf("the daemon exited %d", code)
	}
	if got := names(t, dirs[0].Dir); len(got) != 1 {
		t.Fatalf("a refused restore left %v in the data directory, want the database alone", got)
	}
	before := mustReadFile(t, daemon.StoreFile(dirs[0].Dir))
	records[restored] = mustReadFile(t, filepath.Join(keys, restored)) // the stop may sign none; read again

	r = mustRunWith(t, runConfig{env: dirs[0].env(t)}, "restore", "--data", dirs[0].Dir, "--from", backup)
	t.Logf("restore:\n%s%s", r.stdout, r.stderr)
	for _, want := range []string{"writerd restore: put ", "2 audit events", "is of 4 events, which the backup (2 events) does not extend",
		"Events 3 to 4, and any after them, were signed after the backup and are lost from this log",
		"will see the restored log as a fork of it once it grows past event 2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("restore's output lacks %q", want)
		}
	}
	if r.code != 0 {
		t.Fatalf("restore: exit %d", r.code)
	}
	var aside, kept string
	for _, n := range names(t, keys) {
		if strings.HasPrefix(n, restored+".before-restore-") {
			aside = filepath.Join(keys, n)
		}
	}
	for _, n := range names(t, dirs[0].Dir) {
		if strings.HasPrefix(n, "writerd.db.before-restore-") {
			kept = filepath.Join(dirs[0].Dir, n)
		}
	}
	if aside == "" || mustReadFile(t, aside) != records[restored] {
		t.Errorf("the restored log's record was not set aside whole: the key directory holds %v", names(t, keys))
	}
	if kept == "" || mustReadFile(t, kept) != before {
		t.Errorf("the replaced database was not kept: the data directory holds %v", names(t, dirs[0].Dir))
	}
	for n, b := range records {
		got, err := os.ReadFile(filepath.Join(keys, n))
		switch {
		case n == restored && !os.IsNotExist(err):
			t.Errorf("the restored log's record %s is still in place", n)
		case n != restored && string(got) != b:
			t.Errorf("another log's record %s changed: %v", n, err)
		}
	}
	st := MustOpenStore(t, dirs[0])
	if got := st.projects(); got != 2 {
		t.Errorf("the restored directory holds %d projects, want the backup's 2", got)
	}
	st.s.Close()
	mustCheck(t, dirs[0])
	for i, s := range dirs {
		mustStdioWrites(t, s, fmt.Sprintf("dir%d-after-0001", i)) // each starts, and signs on
		mustCheck(t, s)
	}
}

// Ensure writerd restore changes nothing when it refuses: a backup of
// another log than the data directory holds, and a file that is no whole
// database; and that a backup that extends the record keeps it.
func TestRestore_Refusals(t *testing.T) {
	a, b := testStore{Dir: t.TempDir()}, testStore{Dir: t.TempDir()}
	mustStdioWrites(t, a, "refuse-a-0001")
	mustStdioWrites(t, b, "refuse-b-0001")
	backupB := filepath.Join(t.TempDir(), "writerd.db")
	mustRunOK(t, runConfig{env: b.env(t)}, "backup", "--data", b.Dir, "-o", backupB)
	keys := a.keyDir(t)
	before := map[string]string{}
	for _, n := range names(t, keys) {
		before[n] = mustReadFile(t, filepath.Join(keys, n))
	}
	db := mustReadFile(t, daemon.StoreFile(a.Dir))
	junk := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, says string }{
		{backupB, "but the data directory holds the log"},
		{junk, "is not a whole writerd database ("},
	} {
		r := mustRunWith(t, runConfig{env: a.env(t)}, "restore", "--data", a.Dir, "--from", tc.from)
		mustNotFault(t, r.stderr)
		if r.code != 1 || !strings.Contains(r.stderr, tc.says) || !strings.Contains(r.stderr, "nothing was changed") {
			t.Errorf("restore --from %s: exit %d, want 1 and %q\n%s%s", filepath.Base(tc.from), r.code, tc.says, r.stdout, r.stderr)
		}
		if got := names(t, a.Dir); len(got) != 1 || mustReadFile(t, daemon.StoreFile(a.Dir)) != db {
			t.Errorf("a refused restore changed the data directory: %v", got)
		}
		for n, want := range before {
			if mustReadFile(t, filepath.Join(keys, n)) != want {
				t.Errorf("a refused restore changed %s", n)
			}
		}
	}
	// A backup taken after the last checkpoint holds it: the record stays.
	r := mustRunWith(t, runConfig{env: b.env(t)}, "restore", "--data", b.Dir, "--from", backupB)
	if r.code != 0 || !strings.Contains(r.stdout, "so nothing signed is lost") {
		t.Errorf("restore of a backup that holds the last checkpoint: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	mustCheck(t, b)
	if h := mustRun(t, "help", "restore"); h.code != 0 || !strings.HasPrefix(h.stdout, "usage: writerd restore --from FILE") {
		t.Errorf("help restore: exit %d\n%s", h.code, h.stdout)
	}
}
