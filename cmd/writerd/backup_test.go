package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/postgres/pgtest"
	"github.com/writerd/writerd/storage/storetest"
)

// loadWriter drives create_project over the direct API, each call with a
// key of its own, and remembers each write the daemon acknowledged.
type loadWriter struct {
	d      *httpDaemon
	token  string
	client *http.Client

	mu    sync.Mutex
	acked []ackedWrite
}

type ackedWrite struct{ key, id string }

func (l *loadWriter) run(stop <-chan struct{}, w int) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		key := fmt.Sprintf("load-w%02d-%06d", w, i)
		req, _ := http.NewRequest("POST", l.d.url+"/v1/tools/create_project", strings.NewReader(`{"name":"`+key+`"}`))
		req.Header.Set("Authorization", "Bearer "+l.token)
		req.Header.Set("Idempotency-Key", key)
		resp, err := l.client.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("%s: %d %s", key, resp.StatusCode, b)
		}
		var out struct{ Project struct{ ID string } }
		if err := json.Unmarshal(b, &out); err != nil || out.Project.ID == "" {
			return fmt.Errorf("%s: %s", key, b)
		}
		l.mu.Lock()
		l.acked = append(l.acked, ackedWrite{key, out.Project.ID})
		l.mu.Unlock()
	}
}

// snapshot returns the writes acknowledged so far.
func (l *loadWriter) snapshot() []ackedWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ackedWrite(nil), l.acked...)
}

// mustRunOK runs the binary and fails the test unless it exits 0.
func mustRunOK(t testing.TB, c runConfig, args ...string) ran {
	t.Helper()
	r := mustRunWith(t, c, args...)
	if r.code != 0 {
		t.Fatalf("writerd %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// mustInstall copies a file to to, mode 0600, as install -m 0600 does.
func mustInstall(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(to+".tmp", to); err != nil {
		t.Fatal(err)
	}
}

// mustHoldOnly fails the test unless dir holds exactly the files named:
// a backup leaves no temporary file behind.
func mustHoldOnly(t testing.TB, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, e := range entries {
		have = append(have, e.Name())
	}
	if strings.Join(have, ",") != strings.Join(names, ",") {
		t.Fatalf("%s holds %v, want %v", dir, have, names)
	}
}

// Ensure the backup under load is present, consistent and verifying: with
// 16 writers on the direct API of a real writerd serve, writerd backup
// --server takes a backup mid-load; every write acknowledged before the
// backup began is in it; writerd check and writerd audit verify pass on a
// directory holding it, and its log verifies against the live daemon's
// checkpoints (each one it signed up to the backup's size, and the one an
// auditor saved just before), while the live log extends the backup's;
// and a restore (stop, writerd restore, start) serves the restored data.
func TestBackup_UnderLoad(t *testing.T) {
	ts := boltStores.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	agent := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	auditor := mustToken(t, tokens, "auditor", pipeline.ScopeAudit)
	admin := mustToken(t, tokens, "backup", pipeline.ScopeAdmin)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens, args: []string{"--checkpoint-every", "100"}})
	work := t.TempDir()
	asAuditor := runConfig{env: ts.env(t, "WRITERD_TOKEN="+auditor)}
	asAdmin := runConfig{env: ts.env(t, "WRITERD_TOKEN="+admin)}
	vkey := filepath.Join(work, "writerd.vkey")
	if err := os.WriteFile(vkey, []byte(mustRunOK(t, asAuditor, "audit", "key", "--server", d.url).stdout), 0o600); err != nil {
		t.Fatal(err)
	}

	load := &loadWriter{d: d, token: agent, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			if err := load.run(stop, w); err != nil {
				errs <- err
			}
		})
	}
	stopLoad := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopLoad()
	time.Sleep(600 * time.Millisecond)

	// An auditor keeps a checkpoint; then the backup, mid-load.
	saved := filepath.Join(work, "checkpoint-before.txt")
	if err := os.WriteFile(saved, []byte(mustRunOK(t, asAuditor, "audit", "checkpoint", "--server", d.url, "--now").stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	before := load.snapshot()
	out := filepath.Join(work, "backups", "writerd.db")
	if err := os.Mkdir(filepath.Dir(out), 0o700); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := mustRunOK(t, asAdmin, "backup", "--server", d.url, "-o", out)
	took := time.Since(start)
	during := len(load.snapshot()) - len(before)
	time.Sleep(400 * time.Millisecond)
	stopLoad()
	close(errs)
	for err := range errs {
		t.Fatalf("a writer failed: %v", err)
	}
	all := load.snapshot()
	if len(before) < 100 || len(all) <= len(before) {
		t.Fatalf("%d writes before the backup, %d in all: the load did not run around it", len(before), len(all))
	}
	if !strings.HasPrefix(r.stdout, "writerd backup: wrote "+out+": ") || !strings.Contains(r.stdout, "checked whole") {
		t.Errorf("backup's stdout: %q", r.stdout)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("the backup: %v, %v; want a file of mode 0600", fi, err)
	}
	mustHoldOnly(t, filepath.Dir(out), "writerd.db")

	// Present: open it and look.
	bdir := filepath.Join(work, "check")
	if err := os.Mkdir(bdir, 0o700); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, out, filepath.Join(bdir, bolt.FileName))
	bs := MustOpenStore(t, testStore{Dir: bdir})
	projects, _, err := storetest.Projects(context.Background(), bs.s)
	if err != nil {
		t.Fatal(err)
	}
	inBackup := map[string]bool{}
	for _, p := range projects {
		inBackup[p.ID] = true
	}
	for _, w := range before {
		if !inBackup[w.id] || bs.record("agent", w.key) == nil {
			t.Fatalf("%s (project %s), acknowledged before the backup began, is not in it", w.key, w.id)
		}
	}
	var after *ackedWrite // acknowledged after the backup, and not in it
	for i := len(all) - 1; i >= len(before); i-- {
		if !inBackup[all[i].id] {
			after = &all[i]
			break
		}
	}
	if after == nil {
		t.Fatal("every write is in the backup, even those acknowledged after it ended")
	}
	events := uint64(len(bs.events()))
	bs.s.Close()
	t.Logf("%d writes acknowledged before the backup, %d during its %v, %d in all; the backup holds %d projects and %d events (%d bytes)",
		len(before), during, took.Round(time.Millisecond), len(all), len(projects), events, fi.Size())

	// Consistent and verifying: check, and verify against the live
	// daemon's checkpoints up to the backup's size.
	if r := mustRunOK(t, runConfig{}, "check", "--data", bdir, "--audit-key", vkey); !strings.HasPrefix(r.stdout, "writerd check: no problems") {
		t.Errorf("check: %s", r.stdout)
	}
	resp := d.Do("GET", "/v1/audit/checkpoints", "", "Authorization", "Bearer "+auditor)
	var list struct{ Checkpoints []string }
	if err := json.Unmarshal([]byte(resp.body), &list); err != nil {
		t.Fatalf("the live checkpoints: %d %s", resp.status, resp.body)
	}
	against := []string{"audit", "verify", "--data", bdir, "--key", vkey, "--against", saved}
	pinned := 0
	for i, signed := range list.Checkpoints {
		cp, err := auditlog.ParseSigned([]byte(signed))
		if err != nil {
			t.Fatal(err)
		}
		if cp.Size > events {
			continue
		}
		file := filepath.Join(work, "live-checkpoint-"+strconv.Itoa(i))
		if err := os.WriteFile(file, []byte(signed), 0o600); err != nil {
			t.Fatal(err)
		}
		against = append(against, "--against", file)
		pinned++
	}
	if pinned < 2 {
		t.Fatalf("the live daemon signed %d checkpoints within the backup's %d events, want at least 2", pinned, events)
	}
	if r := mustRunOK(t, runConfig{}, against...); !strings.Contains(r.stdout, "verified "+strconv.FormatUint(events, 10)+" events") || !strings.Contains(r.stdout, "rests on: the checkpoint saved") {
		t.Errorf("verify of the backup against %d live checkpoints:\n%s", pinned+1, r.stdout)
	}
	backupCP := filepath.Join(work, "checkpoint-of-backup.txt")
	if err := os.WriteFile(backupCP, []byte(mustRunOK(t, runConfig{}, "audit", "checkpoint", "--data", bdir).stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRunOK(t, asAuditor, "audit", "verify", "--server", d.url, "--key", vkey, "--against", backupCP)

	// Restore: stop, writerd restore (the file in place, the record of the
	// last checkpoint, signed after the backup, set aside), start.
	if code := d.Stop(); code != 0 {
		t.Fatalf("the daemon exited %d", code)
	}
	origin, _, _ := strings.Cut(strings.TrimSpace(mustReadFile(t, vkey)), "+")
	state := auditlog.StatePath(auditlog.KeyPath(ts.keyDir(t), origin))
	if r := mustRunOK(t, runConfig{env: ts.env(t)}, "restore", "--data", ts.Dir, "--from", out); !strings.Contains(r.stdout, "does not extend. Its record is set aside as ") {
		t.Errorf("restore:\n%s", r.stdout)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the record of the last checkpoint is still in place: %v", err)
	}
	d2 := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens})
	if g := d2.API(agent, "get_project", "", `{"project_id":"`+before[len(before)-1].id+`"}`); g.status != http.StatusOK {
		t.Errorf("a project written before the backup, after the restore: %d %s", g.status, g.body)
	}
	if g := d2.API(agent, "get_project", "", `{"project_id":"`+after.id+`"}`); g.status != http.StatusNotFound {
		t.Errorf("a project written after the backup, after the restore: %d %s; want 404", g.status, g.body)
	}
	if w := d2.API(agent, "create_project", "after-restore-1", `{"name":"after restore"}`); w.status != http.StatusCreated {
		t.Errorf("a write after the restore: %d %s", w.status, w.body)
	}
	if code := d2.Stop(); code != 0 {
		t.Fatalf("the restored daemon exited %d", code)
	}
	if n := MustOpenStore(t, ts).projects(); n != len(projects)+1 {
		t.Errorf("the restored store holds %d projects, want the backup's %d and one more", n, len(projects))
	}
	mustRunOK(t, runConfig{env: ts.env(t)}, "audit", "verify", "--data", ts.Dir, "--key", vkey)
}

func mustReadFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Ensure the backup route answers 401 without a token and 403 naming the
// admin scope to a token without it (the audit scope included), over HTTP
// and through writerd backup, whose -o is then left as it was.
func TestBackup_Scopes(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	others := mustToken(t, tokens, "auditor", pipeline.ScopeRead|pipeline.ScopeWrite|pipeline.ScopeAudit)
	d := MustStartHTTP(t, httpConfig{tokens: tokens})

	if r := d.Do("GET", "/v1/admin/backup", ""); r.status != http.StatusUnauthorized || r.errorCode() != "UNAUTHENTICATED" {
		t.Errorf("no token: %d %s", r.status, r.body)
	}
	r := d.Do("GET", "/v1/admin/backup", "", "Authorization", "Bearer "+others)
	var e envelope
	json.Unmarshal([]byte(r.body), &e)
	if r.status != http.StatusForbidden || e.Error.Code != "PERMISSION_DENIED" || !strings.Contains(e.Error.Message, "admin scope") || r.header.Get("Content-Disposition") != "" {
		t.Errorf("read, write and audit scopes: %d %s; want 403 naming the admin scope", r.status, r.body)
	}

	dir := t.TempDir()
	out := filepath.Join(dir, "writerd.db")
	if err := os.WriteFile(out, []byte("the backup of yesterday"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, says string
	}{
		{"no token", "", "writerd: the daemon wants a token: set WRITERD_TOKEN, or give --token-file, with a token that has the admin scope"},
		{"unknown token", "wrd_" + strings.Repeat("A", 43), "writerd: the daemon refused the token (401)"},
		{"no admin scope", others, "writerd: the token lacks the admin scope, which backups need"},
	} {
		r := mustRunWith(t, runConfig{env: []string{"WRITERD_TOKEN=" + tc.token}}, "backup", "--server", d.url, "-o", out)
		if r.code != 1 || !strings.HasPrefix(r.stderr, tc.says) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("%s: exit %d, stderr %q", tc.name, r.code, r.stderr)
		}
		if got := mustReadFile(t, out); got != "the backup of yesterday" {
			t.Errorf("%s: -o now holds %q", tc.name, got)
		}
		mustHoldOnly(t, dir, "writerd.db")
	}
}

// mustBackupDaemon starts a daemon on a bbolt store of its own with
// projects made over the direct API, each with description, and returns
// the store, the daemon and a token with the admin scope.
func mustBackupDaemon(t *testing.T, projects int, description string) (testStore, *httpDaemon, string) {
	t.Helper()
	ts := boltStores.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	agent := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	admin := mustToken(t, tokens, "backup", pipeline.ScopeAdmin)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens})
	for i := range projects {
		body := fmt.Sprintf(`{"name":"p%d","description":"%s"}`, i, description)
		if w := d.API(agent, "create_project", fmt.Sprintf("project-%04d", i), body); w.status != http.StatusCreated {
			t.Fatal(w.body)
		}
	}
	return ts, d, admin
}

// Ensure --data backs up a store no daemon holds, and refuses clearly, at
// once, one a daemon holds; and that no backup is written over a live
// database.
func TestBackup_DataDir(t *testing.T) {
	ts, d, admin := mustBackupDaemon(t, 5, "")
	dir := t.TempDir()
	out := filepath.Join(dir, "copy.db")
	start := time.Now()
	r := mustRunWith(t, runConfig{env: ts.env(t)}, "backup", "--data", ts.Dir, "-o", out)
	if r.code != 1 || r.stderr != "writerd: <data>/writerd.db is held by a running writerd process, so it cannot be copied from the data directory; back it up through that daemon with --server URL and a token with the admin scope\n" {
		t.Errorf("--data on a held store: exit %d, %q", r.code, r.stderr)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	live := filepath.Join(ts.Dir, bolt.FileName)
	r = mustRunWith(t, runConfig{env: ts.env(t, "WRITERD_TOKEN="+admin)}, "backup", "--server", d.url, "-o", live)
	if r.code != 1 || r.stderr != "writerd: "+live+" is the database of a running writerd process; write the backup to another file\n" {
		t.Errorf("-o over the live database: exit %d, %q", r.code, r.stderr)
	}
	mustHoldOnly(t, dir)

	if code := d.Stop(); code != 0 {
		t.Fatalf("the daemon exited %d", code)
	}
	r = mustRunOK(t, runConfig{env: ts.env(t)}, "backup", "--data", ts.Dir, "-o", out)
	if !strings.Contains(r.stdout, "holding 5 audit events, checked whole") {
		t.Errorf("--data: %q", r.stdout)
	}
	r = mustRunWith(t, runConfig{env: ts.env(t)}, "backup", "--data", ts.Dir, "-o", live)
	if r.code != 1 || r.stderr != "writerd: "+live+" is the database --data names; write the backup to another file\n" {
		t.Errorf("-o over its own source: exit %d, %q", r.code, r.stderr)
	}
	bdir := t.TempDir()
	mustInstall(t, out, filepath.Join(bdir, bolt.FileName))
	mustRunOK(t, runConfig{env: ts.env(t)}, "check", "--data", bdir)
	if n := MustOpenStore(t, testStore{Dir: bdir}).projects(); n != 5 {
		t.Errorf("the backup holds %d projects, want 5", n)
	}
}

// cutProxy stands in front of a daemon and passes its backup on damaged
// as cut says: the daemon's headers, then the body cut returns, then the
// connection closes.
func cutProxy(t testing.TB, daemonURL string, keepLength bool, cut func([]byte) []byte) string {
	t.Helper()
	target, _ := url.Parse(daemonURL)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequest(r.Method, target.JoinPath(r.URL.Path).String(), nil)
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for k, v := range resp.Header {
			if k != "Content-Length" || keepLength {
				w.Header()[k] = v
			}
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
		w.Header().Set("Connection", "close")
		w.Header().Write(buf)
		buf.WriteString("\r\n")
		buf.Write(cut(body))
		buf.Flush()
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Ensure a backup whose stream is cut short, or whose bytes are not a
// whole database, leaves -o as it was and no temporary file, exits 1 and
// says so in one sentence: the daemon dying mid-stream (a body short of
// its Content-Length), a proxy that dropped the length and the end of
// the body, and a body of the right length whose second half is zeros.
func TestBackup_CutShort(t *testing.T) {
	_, d, admin := mustBackupDaemon(t, 50, strings.Repeat("x", 900))
	half := func(b []byte) []byte { return b[:len(b)/2] }
	for _, tc := range []struct {
		name       string
		keepLength bool
		cut        func([]byte) []byte
		says       string
	}{
		{"cut short", true, half, "writerd: the backup was cut short after "},
		{"cut short, no length", false, half, "writerd: the copy received is not a whole writerd database (the file is shorter than its meta page says (truncated?)), so "},
		{"zeros", true, func(b []byte) []byte { b = bytes.Clone(b); clear(b[len(b)/2:]); return b }, "writerd: the copy received is not a whole writerd database ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "writerd.db")
			if err := os.WriteFile(out, []byte("the backup of yesterday"), 0o600); err != nil {
				t.Fatal(err)
			}
			proxy := cutProxy(t, d.url, tc.keepLength, tc.cut)
			r := mustRunWith(t, runConfig{env: []string{"WRITERD_TOKEN=" + admin}}, "backup", "--server", proxy, "-o", out)
			if r.code != 1 || !strings.HasPrefix(r.stderr, tc.says) || !strings.HasSuffix(r.stderr, out+" was not written; take the backup again\n") && !strings.HasSuffix(r.stderr, out+" was not written; take it again\n") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("exit %d, stderr %q", r.code, r.stderr)
			}
			mustNotFault(t, r.stderr)
			if got := mustReadFile(t, out); got != "the backup of yesterday" {
				t.Errorf("-o now holds %d bytes", len(got))
			}
			mustHoldOnly(t, dir, "writerd.db")
		})
	}
}

// Ensure a PostgreSQL daemon answers a backup 404 NOT_FOUND telling the
// operator to use pg_dump, and that writerd backup says the same, from
// the daemon and with --store.
func TestBackup_Postgres(t *testing.T) {
	pgtest.URL(t) // skips without a PostgreSQL server
	ts := pgStores.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	admin := mustToken(t, tokens, "backup", pipeline.ScopeAdmin)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens})
	r := d.Do("GET", "/v1/admin/backup", "", "Authorization", "Bearer "+admin)
	var e envelope
	json.Unmarshal([]byte(r.body), &e)
	if r.status != http.StatusNotFound || e.Error.Code != "NOT_FOUND" || e.Error.Message != daemon.NoBackupMessage {
		t.Errorf("GET on PostgreSQL: %d %s", r.status, r.body)
	}
	out := filepath.Join(t.TempDir(), "writerd.db")
	for _, args := range [][]string{{"--server", d.url}, {"--store", ts.URL}} {
		r := mustRunWith(t, runConfig{env: ts.env(t, "WRITERD_TOKEN="+admin)}, append([]string{"backup", "-o", out}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "back it up with PostgreSQL's own tools (pg_dump") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q", args[0], r.code, r.stderr)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%v: -o was written", args[0])
		}
	}
}

// Ensure writerd backup keeps the command line's conventions: help to
// stdout; -o missing, a directory, two stores or a bad URL are usage
// errors (exit 2, one sentence, the usage once).
func TestBackup_Usage(t *testing.T) {
	const usageLine = "usage: writerd backup -o FILE [--server URL [--token-file FILE] | --data DIR]"
	mustFollowUsage(t, mustRun(t, "help", "backup"), 0, usageLine, "", usageLine)
	mustFollowUsage(t, mustRun(t, "backup", "-h"), 0, usageLine, "", usageLine)
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--data", dir}, "writerd backup: -o is required: the file to write the backup to"},
		{[]string{"-o", dir}, "writerd backup: -o names a directory; name the backup's file in it, such as " + filepath.Join(dir, "writerd.db")},
		{[]string{"-o", filepath.Join(dir, "b.db"), "--server", "http://127.0.0.1:1", "--data", dir}, "writerd backup: --server and --data each name the store to back up; give one of them"},
		{[]string{"-o", filepath.Join(dir, "b.db"), "--server", "ftp://example"}, "writerd backup: --server takes the daemon's URL, such as http://127.0.0.1:7070"},
		{[]string{"-o", filepath.Join(dir, "b.db"), "--token-file", "/nonexistent", "--data", dir}, "writerd backup: --token-file is for --server; a data directory is read without a token"},
		{[]string{"-o", filepath.Join(dir, "b.db"), "extra"}, `writerd backup: unexpected argument "extra"`},
	} {
		mustFollowUsage(t, mustRun(t, append([]string{"backup"}, tc.args...)...), 2, usageLine, tc.says, usageLine)
	}
	mustHoldOnly(t, dir)
}

// Ensure the shell block of README.md's "Backing up" runs as it is
// written, with its directories, the port and the home directory replaced
// by the test's own and writerd the binary under test: the backup while
// the daemon serves, its check and verify, and the restore, after which
// the daemon serves what the backup held and not the write after it.
func TestBackup_ReadmeBlock(t *testing.T) {
	block := readmeBlock(t, "## Backing up")
	work := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	script := strings.NewReplacer(
		"/etc/writerd", filepath.Join(work, "etc"),
		"/var/lib/writerd", filepath.Join(work, "data"),
		"/var/backups/writerd", filepath.Join(work, "backups"),
		"127.0.0.1:7070", "127.0.0.1:"+port,
	).Replace(block)
	home := filepath.Join(work, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := readmeShell(ctx, work, home, script, "-euo", "pipefail") // the daemons it starts are its group's
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	killGroup(cmd) // whatever of its group is left, on failure
	if err != nil {
		serveLog, _ := os.ReadFile(filepath.Join(work, "etc", "serve.log"))
		t.Fatalf("the block failed: %v\nstdout:\n%s\nstderr:\n%s\nserve.log:\n%s", err, stdout.String(), stderr.String(), serveLog)
	}
	for _, want := range []string{"writerd backup: wrote ", "writerd check: no problems", "verified 1 event ", `"name":"kept"`,
		"writerd restore: put ", "Event 2, and any after it, was signed after the backup and is lost from this log"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), `"name":"lost"`) {
		t.Errorf("the restored daemon serves the write made after the backup:\n%s", stdout.String())
	}
	t.Logf("stdout:\n%s", stdout.String())
}
