package main

import (
	"bytes"
	byteorder "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/bolttest"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// pathMarker names the data directories of these tests, so that a test
// can see that the path never reaches an answer or a log line.
const pathMarker = "zzPATHMARKERzz"

// markedDir returns a new data directory path (not created) holding the
// marker.
func markedDir(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), pathMarker)
}

// mustNotShowPath fails the test if out holds the data directory.
func mustNotShowPath(t testing.TB, what, out string) {
	t.Helper()
	if strings.Contains(out, pathMarker) {
		t.Fatalf("%s shows the data directory:\n%s", what, out)
	}
}

// mustWrittenStore has the daemon create n projects with long
// descriptions (enough that the projects bucket is a branch page over
// leaves), stops it, and returns its data directory.
func mustWrittenStore(t testing.TB, n int) string {
	t.Helper()
	d := MustStart(t)
	for i := range n {
		mustSucceed(t, d.Call("create_project", fmt.Sprintf(`{"idempotency_key":"key-%06d","name":"project-%d","description":"%s"}`, i, i, strings.Repeat("d", 2000))))
	}
	d.Stop()
	return d.dir
}

// mustCopyBoltFile copies the database file of dir into a new marked data
// directory and returns it.
func mustCopyBoltFile(t testing.TB, dir string) string {
	t.Helper()
	b, err := os.ReadFile(bolttest.File(dir))
	if err != nil {
		t.Fatal(err)
	}
	cp := markedDir(t)
	if err := os.Mkdir(cp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bolttest.File(cp), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return cp
}

var native = byteorder.NativeEndian

// Ensure a damaged database never faults the daemon: a file that bbolt
// cannot safely map, or whose pages bbolt's own check refuses, is refused
// at start-up with one sentence naming the damage and then exit 1; damage
// bbolt works around (one meta page) or that lies in the values (a
// project's JSON) lets it start, with a warning for the meta page; and
// writerd check names every one of them, one per line, then exit 1. No
// runtime fault text, no path.
func TestStore_Damaged(t *testing.T) {
	written := mustWrittenStore(t, 40)
	tests := []struct {
		name   string
		damage func(t testing.TB, p bolttest.Pages)
		refuse string // what start-up's sentence names; "" if it starts
		warn   string // the warning start-up logs
		check  string // a line of writerd check's list
	}{
		{"truncated", func(t testing.TB, p bolttest.Pages) {
			p.Truncate(t, (p.HWM-1)*p.PageSize)
		}, "the file is shorter than its meta page says (truncated?)", "", "the file is shorter than its meta page says (truncated?)"},
		{"both meta pages", func(t testing.TB, p bolttest.Pages) {
			p.Patch(t, 0, 16, []byte("junk"))
			p.Patch(t, 1, 16, []byte("junk"))
		}, "neither meta page is valid", "", "neither meta page is valid"},
		{"a branch page's type", func(t testing.TB, p bolttest.Pages) {
			p.Patch(t, p.Branch, 8, native.AppendUint16(nil, 0x40))
		}, "is neither a branch nor a leaf page (flags 0x40)", "", "is neither a branch nor a leaf page (flags 0x40)"},
		{"a leaf page's value size", func(t testing.TB, p bolttest.Pages) {
			p.Patch(t, p.Leaf, 16+12, native.AppendUint32(nil, 1<<30))
		}, "the key or value of element 0 lies outside the page", "", "the key or value of element 0 lies outside the page"},
		{"keys out of order", func(t testing.TB, p bolttest.Pages) {
			b := p.Read(t)
			e := int64(p.Leaf)*p.PageSize + 16 + 16 // the second element
			p.Patch(t, p.Leaf, 16+16+int64(native.Uint32(b[e+4:])), []byte{0})
		}, "bbolt's consistency check finds", "", "needs to be"},
		{"one meta page", func(t testing.TB, p bolttest.Pages) {
			p.Patch(t, uint64(p.Older), 16+56, make([]byte, 8)) // its checksum
		}, "", "fails its checksum; bbolt uses the other one", "fails its checksum; bbolt uses the other one"},
		{"a project's stored JSON", func(t testing.TB, p bolttest.Pages) {
			p.Patch(t, p.Leaf, p.Value(t, p.Leaf, 0), []byte("#"))
		}, "", "", "cannot be read back"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := mustCopyBoltFile(t, written)
			p := bolttest.FindPages(t, dir)
			tt.damage(t, p)
			before := p.Read(t)

			check := mustRun(t, "check", "--data", dir)
			mustNotFault(t, check.stderr)
			mustNotShowPath(t, "writerd check", check.stdout+check.stderr)
			if check.code != 1 || check.stderr != "" || !strings.Contains(check.stdout, tt.check) {
				t.Fatalf("check: exit %d, stderr %q, stdout:\n%s\nwant exit 1 and a line with %q", check.code, check.stderr, check.stdout, tt.check)
			}
			lines := strings.Split(strings.TrimSuffix(check.stdout, "\n"), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "writerd check: ") || !strings.Contains(last, "problem") {
				t.Errorf("check's last line %q, want the summary", last)
			}
			if !bytes.Equal(before, p.Read(t)) {
				t.Fatal("writerd check changed the file")
			}

			serve := mustRun(t, "serve", "--stdio", "--data", dir)
			mustNotFault(t, serve.stderr)
			// The refusal at start-up is the operator's own command's: it
			// names the data directory given, once, at its end; the log
			// lines never do.
			named := " (<data> is " + dir + ", the --data given)\n"
			mustNotShowPath(t, "serve's stderr", strings.Replace(serve.stderr, named, "\n", 1))
			if tt.refuse != "" {
				want := "writerd: <data>/writerd.db is damaged: "
				if serve.code != 1 || strings.Count(serve.stderr, "\n") != 1 || !strings.HasPrefix(serve.stderr, want) ||
					!strings.Contains(serve.stderr, tt.refuse) || !strings.HasSuffix(serve.stderr, "; run writerd check --data DIR to list the damage"+named) {
					t.Fatalf("serve: exit %d, stderr:\n%s\nwant exit 1 and one sentence: %s…%s…", serve.code, serve.stderr, want, tt.refuse)
				}
				if serve.stdout != "" {
					t.Errorf("serve wrote to stdout: %q", serve.stdout)
				}
				return
			}
			if serve.code != 0 {
				t.Fatalf("serve: exit %d, stderr:\n%s", serve.code, serve.stderr)
			}
			warned := false
			for line := range strings.Lines(serve.stderr) {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) == nil && m["level"] == "WARN" && m["msg"] == "store damaged" {
					warned = strings.Contains(fmt.Sprint(m["damage"]), tt.warn)
				}
			}
			if warned != (tt.warn != "") {
				t.Errorf("serve warned %v, want a warning %q:\n%s", warned, tt.warn, serve.stderr)
			}
		})
	}
}

// Ensure writerd check passes a database the daemon wrote, reads it only,
// and says so in one line.
func TestCheck_Clean(t *testing.T) {
	dir := mustCopyBoltFile(t, mustWrittenStore(t, 40))
	before, _ := os.ReadFile(bolttest.File(dir))
	r := mustRun(t, "check", "--data", dir)
	if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "writerd check: no problems in ") ||
		!strings.HasSuffix(r.stdout, " pages and 40 audit events.\n") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("check: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if after, _ := os.ReadFile(bolttest.File(dir)); !bytes.Equal(before, after) {
		t.Fatal("writerd check changed the file")
	}
}

// Ensure writerd check creates nothing: a missing data directory or
// database is one sentence and exit 1, and stays missing.
func TestCheck_NoDatabase(t *testing.T) {
	for _, dir := range []string{markedDir(t), t.TempDir()} {
		r := mustRun(t, "check", "--data", dir)
		if r.code != 1 || r.stdout != "" || r.stderr != "writerd: there is nothing to check: <data>/writerd.db does not exist (nothing was created); --data names a writerd data directory\n" {
			t.Fatalf("check of %s: exit %d, stdout %q, stderr %q", filepath.Base(dir), r.code, r.stdout, r.stderr)
		}
		if entries, err := os.ReadDir(dir); err == nil && len(entries) != 0 || err != nil && !os.IsNotExist(err) {
			t.Fatalf("check created %v (%v)", entries, err)
		}
	}
	t.Run("postgres", func(t *testing.T) {
		empty := pgtest.Empty(t)
		r := mustRun(t, "check", "--store", empty)
		if r.code != 1 || r.stdout != "" || !strings.HasPrefix(r.stderr, "writerd: there is nothing to check: the PostgreSQL database writerd_empty_") ||
			!strings.HasSuffix(r.stderr, " does not exist or holds no writerd schema (nothing was created); writerd serve --store creates the schema in an existing database\n") {
			t.Fatalf("check of an empty database: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if tables := pgtest.Tables(t, empty); len(tables) != 0 {
			t.Fatalf("check created %v", tables)
		}
		// A database the server does not have: check says so; serve
		// refuses to start, saying what to create, and creates nothing.
		missing := pgtest.WithDatabase(pgtest.URL(t), "writerd_missing_db")
		r = mustRun(t, "check", "--store", missing)
		if r.code != 1 || r.stderr != "writerd: there is nothing to check: the PostgreSQL database writerd_missing_db does not exist or holds no writerd schema (nothing was created); writerd serve --store creates the schema in an existing database\n" {
			t.Fatalf("check of a missing database: exit %d, stderr %q", r.code, r.stderr)
		}
		key := filepath.Join(t.TempDir(), "audit-signing.key")
		r = mustRun(t, "serve", "--stdio", "--store", missing, "--audit-key", key)
		if r.code != 1 || !strings.HasSuffix(r.stderr, "the PostgreSQL database writerd_missing_db does not exist: create it first, owned by the role writerd connects as (CREATE DATABASE … OWNER …); writerd creates its schema in it\n") {
			t.Fatalf("serve on a missing database: exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// Ensure --data on the command line wins over a WRITERD_STORE in the
// environment, as every flag given wins over its variable: check reads the
// data directory and never tries the server the variable names.
func TestCheck_DataOverStoreVariable(t *testing.T) {
	dir := mustWrittenStore(t, 2)
	r := mustRunWith(t, runConfig{env: []string{"WRITERD_STORE=postgres://writerd@127.0.0.1:1/writerd"}}, "check", "--data", dir)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "writerd check: no problems in ") || r.stderr != "" {
		t.Fatalf("check --data with WRITERD_STORE set: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// Ensure writerd check on the database of a running daemon says, in one
// sentence, that it is in use, without waiting for the daemon.
func TestCheck_HeldStore(t *testing.T) {
	d := mustStartWith(t, daemonConfig{dir: markedDir(t)})
	mustSucceed(t, d.Call("create_project", `{"idempotency_key":"key-000001","name":"alpha"}`))
	r := mustRun(t, "check", "--data", d.dir)
	want := "writerd: <data>/writerd.db is in use by a running writerd process; stop it first, or check a copy of the data directory\n"
	if r.code != 1 || r.stdout != "" || r.stderr != want {
		t.Fatalf("check: exit %d, stdout %q, stderr %q; want exit 1 and %q", r.code, r.stdout, r.stderr, want)
	}
	mustSucceed(t, d.Call("create_project", `{"idempotency_key":"key-000002","name":"beta"}`))
}

// Ensure writerd check names a broken promise of the domain store: a
// project at a revision no ok event wrote, and an ok event whose project
// is gone without a delete.
func TestCheck_DomainInvariants(t *testing.T) {
	dir := mustCopyBoltFile(t, mustWrittenStore(t, 2))
	var bumped, gone string
	bolttest.Update(t, dir, func(tx bolttest.Tx) error {
		b := tx.Projects()
		k, v := b.Cursor().First()
		var p handlers.Project
		if err := json.Unmarshal(v, &p); err != nil {
			return err
		}
		p.Revision = 2
		v, _ = json.Marshal(p)
		bumped = p.ID
		if err := b.Put(k, v); err != nil {
			return err
		}
		k, _ = b.Cursor().Last()
		gone = string(k)
		return b.Delete(k)
	})
	r := mustRun(t, "check", "--data", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "project "+bumped+" at revision 2 has no ok audit event\n") ||
		!strings.Contains(r.stdout, " (create_project) wrote project "+gone+" at revision 1, which is gone without a delete event\n") ||
		!strings.Contains(r.stdout, "writerd check: 2 problems in ") {
		t.Fatalf("check: exit %d, stdout:\n%s\nstderr %q", r.code, r.stdout, r.stderr)
	}
}

// Ensure a second serve --stdio on a held data directory keeps its
// session: it answers tools/list, answers each tool call UNAVAILABLE with
// the guidance sentence and retry same_key, writing nothing; and once the
// first daemon exits, it opens the store and the same call with the same
// key succeeds, once. It logs once that it waits and once that it opened,
// without the path.
func TestServe_HeldStore(t *testing.T) {
	first := mustStartWith(t, daemonConfig{dir: markedDir(t)})
	mustSucceed(t, first.Call("create_project", `{"idempotency_key":"key-first-1","name":"first"}`))

	second := mustStartWith(t, daemonConfig{dir: first.dir})
	list, err := second.session.ListTools(t.Context(), nil)
	if err != nil || len(list.Tools) == 0 {
		t.Fatalf("tools/list on a held store: %v, %d tools", err, len(list.Tools))
	}
	call := `{"idempotency_key":"key-second-1","name":"second"}`
	for _, res := range []struct{ tool, args string }{{"create_project", call}, {"list_projects", `{}`}} {
		e := mustFail(t, second.Call(res.tool, res.args), "UNAVAILABLE")
		if e.Error.Message != bolt.HeldMessage || e.Error.Retry != "same_key" || e.Error.Status != 503 {
			t.Fatalf("%s on a held store: %+v", res.tool, e.Error)
		}
	}
	mustSucceed(t, first.Call("list_projects", `{}`)) // the first serves on

	first.Stop()
	var res = second.Call("create_project", call)
	for deadline := time.Now().Add(30 * time.Second); res.IsError && time.Now().Before(deadline); {
		mustFail(t, res, "UNAVAILABLE") // as told: the same call, the same key, a little later
		time.Sleep(100 * time.Millisecond)
		res = second.Call("create_project", call)
	}
	created := mustSucceed(t, res)["project"].(map[string]any)
	if again := second.Call("create_project", call); again.Meta["writerd/replayed"] != true {
		t.Fatalf("the retry is not a replay: %v", again.Meta)
	}
	second.Stop()

	log := second.stderr.String()
	mustNotShowPath(t, "the second daemon's log", log+first.stderr.String())
	if n := strings.Count(log, `"msg":"store in use by another writerd process`); n != 1 {
		t.Errorf("the wait is logged %d times, want once:\n%s", n, log)
	}
	if n := strings.Count(log, `"msg":"store opened"`); n != 1 {
		t.Errorf("the opening is logged %d times, want once:\n%s", n, log)
	}
	s := MustOpenStore(t, first.store)
	if n := s.projects(); n != 2 {
		t.Fatalf("projects = %d, want 2", n)
	}
	if evs := s.eventsFor("key-second-1"); len(evs) != 1 || evs[0].Targets[0].ID != created["id"] {
		t.Fatalf("events of the retried key: %+v", evs)
	}
}

// Ensure --data (or WRITERD_DATA) takes an absolute directory or one
// starting with ~/, which is the home directory; refuses a relative one
// with one sentence and exit 2, creating nothing where the client started
// writerd; and that the default is $XDG_DATA_HOME/writerd (an absolute
// XDG_DATA_HOME only), else ~/.local/share/writerd.
func TestServe_DataDir(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want string // the database, under the home directory; "" if refused
		err  string // the first line of stderr when refused
	}{
		{"~/ is the home directory", []string{"--data", "~/store"}, nil, "store/writerd.db", ""},
		{"~ alone", []string{"--data", "~"}, nil, "writerd.db", ""},
		{"~/ from the environment", nil, []string{"WRITERD_DATA=~/env-store"}, "env-store/writerd.db", ""},
		{"absolute", []string{"--data", "HOME/abs"}, nil, "abs/writerd.db", ""},
		{"default: XDG_DATA_HOME", nil, []string{"XDG_DATA_HOME=HOME/xdg"}, "xdg/writerd/writerd.db", ""},
		{"default: home", nil, nil, ".local/share/writerd/writerd.db", ""},
		{"default: a relative XDG_DATA_HOME is ignored", nil, []string{"XDG_DATA_HOME=xdg"}, ".local/share/writerd/writerd.db", ""},
		{"relative", []string{"--data", "store"}, nil, "", "writerd serve: --data takes an absolute path, such as /var/lib/writerd or ~/writerd, not a relative one"},
		{"dot-relative", []string{"--data", "./store"}, nil, "", "writerd serve: --data takes an absolute path, such as /var/lib/writerd or ~/writerd, not a relative one"},
		{"another user's home", []string{"--data", "~other/store"}, nil, "", "writerd serve: --data takes an absolute path, such as /var/lib/writerd or ~/writerd, not a relative one"},
		{"empty", []string{"--data", ""}, nil, "", "writerd serve: --data takes an absolute path, such as /var/lib/writerd or ~/writerd, not a relative one"},
		{"relative from the environment", nil, []string{"WRITERD_DATA=store"}, "", "writerd serve: WRITERD_DATA takes an absolute path, such as /var/lib/writerd or ~/writerd, not a relative one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home, cwd := t.TempDir(), t.TempDir()
			env := []string{"HOME=" + home, "XDG_DATA_HOME="}
			for _, e := range tt.env {
				env = append(env, strings.ReplaceAll(e, "HOME/", home+"/"))
			}
			args := []string{"serve", "--stdio"}
			for _, a := range tt.args {
				args = append(args, strings.ReplaceAll(a, "HOME/", home+"/"))
			}
			r := mustRunWith(t, runConfig{cwd: cwd, env: env}, args...)
			if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
				t.Fatalf("serve created %v where it was started", entries)
			}
			if tt.want == "" {
				mustFollowUsage(t, r, 2, serveUsageLine, tt.err, serveUsageLine)
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
			}
			if _, err := os.Stat(filepath.Join(home, tt.want)); err != nil {
				t.Fatalf("no database at ~/%s: %v", tt.want, err)
			}
			mustNotShowPath(t, "serve's stderr", r.stderr)
			if strings.Contains(r.stderr, home) {
				t.Fatalf("the log shows the data directory:\n%s", r.stderr)
			}
		})
	}
	// writerd check takes --data by the same rule.
	r := mustRunWith(t, runConfig{cwd: t.TempDir()}, "check", "--data", "store")
	if first, _, _ := strings.Cut(r.stderr, "\n"); r.code != 2 || first != "writerd check: --data takes an absolute path, such as /var/lib/writerd or ~/writerd, not a relative one" {
		t.Fatalf("check --data store: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	home := t.TempDir()
	mustRunWith(t, runConfig{env: []string{"HOME=" + home}}, "serve", "--stdio", "--data", "~/store")
	if r := mustRunWith(t, runConfig{env: []string{"HOME=" + home}}, "check", "--data", "~/store"); r.code != 0 {
		t.Fatalf("check --data ~/store: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// Ensure the data directory's path reaches no line of stderr: through a
// session with a failing call, a start-up that cannot make the directory
// (a file stands where it should be) or open the file (a directory stands
// where it should be), and a storage error during a call, whose cause
// names the file as <data>/writerd.db. (Held stores: TestServe_HeldStore;
// damaged files: TestStore_Damaged.)
// withoutDataNamed is a start-up error of the operator's own command
// without the one place it names the data directory it was given, at
// its end; the test fails if it is not there.
func withoutDataNamed(t testing.TB, stderr, dir string) string {
	t.Helper()
	named := " (<data> is " + dir + ", the --data given)\n"
	if !strings.HasSuffix(stderr, named) {
		t.Errorf("the start-up error does not end naming the data directory given:\n%s", stderr)
	}
	return strings.TrimSuffix(stderr, named) + "\n"
}

func TestLogs_NoDataDirectory(t *testing.T) {
	t.Run("a session", func(t *testing.T) {
		d := mustStartWith(t, daemonConfig{dir: markedDir(t), bin: testBinary})
		mustSucceed(t, d.Call("create_project", `{"idempotency_key":"key-000001","name":"alpha"}`))
		mustFail(t, d.Call("test_error", `{"idempotency_key":"key-000002"}`), "INTERNAL")
		d.Stop()
		mustNotShowPath(t, "the log", d.stderr.String())
	})
	t.Run("a file where the directory should be", func(t *testing.T) {
		dir := markedDir(t)
		if err := os.WriteFile(dir, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, data := range []string{dir, filepath.Join(dir, "data")} {
			r := mustRun(t, "serve", "--stdio", "--data", data)
			mustNotShowPath(t, "serve's stderr", withoutDataNamed(t, r.stderr, data))
			if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "<data>") {
				t.Fatalf("serve: exit %d, stderr %q; want exit 1 and one line naming <data>", r.code, r.stderr)
			}
			r = mustRun(t, "check", "--data", data)
			mustNotShowPath(t, "check's stderr", withoutDataNamed(t, r.stderr, data))
			if r.code != 1 || strings.Count(r.stderr, "\n") != 1 {
				t.Fatalf("check: exit %d, stderr %q", r.code, r.stderr)
			}
		}
	})
	t.Run("a directory where the file should be", func(t *testing.T) {
		dir := markedDir(t)
		if err := os.MkdirAll(bolttest.File(dir), 0o700); err != nil {
			t.Fatal(err)
		}
		r := mustRun(t, "serve", "--stdio", "--data", dir)
		mustNotShowPath(t, "serve's stderr", withoutDataNamed(t, r.stderr, dir))
		if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "<data>/writerd.db") {
			t.Fatalf("serve: exit %d, stderr %q; want exit 1 and one line naming <data>/writerd.db", r.code, r.stderr)
		}
	})
	t.Run("a storage error during a call", func(t *testing.T) {
		d := mustStartWith(t, daemonConfig{dir: markedDir(t), bin: testBinary, env: []string{"WRITERD_TEST_FAULT=file-size-limit"}})
		failed := false
		for i := 0; i < 500 && !failed; i++ {
			res := d.Call("create_project", fmt.Sprintf(`{"idempotency_key":"key-%06d","name":"p-%d","description":"%s"}`, i, i, strings.Repeat("d", 2000)))
			failed = res.IsError
			if failed {
				mustNotShowPath(t, "the answer", text(t, res))
			}
		}
		d.Stop()
		if !failed {
			t.Fatal("no call failed under the file size limit")
		}
		log := d.stderr.String()
		mustNotShowPath(t, "the log", log)
		if !strings.Contains(log, "<data>/writerd.db") {
			t.Fatalf("the storage error's cause does not name <data>/writerd.db:\n%s", log)
		}
	})
}

// Ensure serve --addr on a port in use exits 1 with one sentence naming
// the address, having made nothing: no data directory, no writerd.db, no
// signing key, no key directory.
func TestServe_FailedBindLeavesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	home := t.TempDir()
	data := filepath.Join(home, "data")
	config := filepath.Join(home, "config")
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	r := mustRunWith(t, runConfig{env: []string{"HOME=" + home, "XDG_CONFIG_HOME=" + config, "XDG_DATA_HOME="}},
		"serve", "--addr", ln.Addr().String(), "--data", data, "--tokens", tokens)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	if first, _, _ := strings.Cut(r.stderr, "\n"); !strings.HasPrefix(first, "writerd: serve: cannot listen on "+ln.Addr().String()+": ") {
		t.Errorf("stderr begins %q, want the address refused", first)
	}
	for _, p := range []string{data, config} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after the failed start (%v)", p, err)
		}
	}
	entries, _ := os.ReadDir(home)
	for _, e := range entries {
		t.Errorf("the failed start made %s in the home directory", e.Name())
	}
}
