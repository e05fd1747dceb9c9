package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// Ensure every audit command prints the same against a running daemon
// (--server, while every event is signed) and against its store once it
// stopped (--data or --store); that while it runs, a data directory is
// refused within a second with a sentence naming --server (a PostgreSQL
// database is not: replicas share it); and that a store with no log is an
// error that creates nothing.
func TestAudit_SameFromDaemonAndStore(t *testing.T) { eachStore(t, testAuditSameFromDaemonAndStore) }

// localFlags are the flags that read s for an audit command: with the
// key file where the command checks checkpoints or prints the key.
func localFlags(s testStore, command string) []string {
	switch command {
	case "list", "tail", "checkpoint":
		return s.storeFlags()
	}
	return s.auditFlags()
}

func testAuditSameFromDaemonAndStore(t *testing.T, kind storeKind) {
	s := kind.make(t)
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file, args: []string{"--checkpoint-every", "1"}})
	mustWriteScript(t, d, tok.agent, "same")
	mustWaitCheckpoint(t, d, tok.auditor, auditScriptEvents, 15*time.Second)
	env := []string{"WRITERD_TOKEN=" + tok.auditor}

	// The held store, for every command: a data directory is refused; a
	// PostgreSQL database, which replicas share, is read while the daemon
	// runs on it.
	for _, args := range [][]string{{"list"}, {"show", "1"}, {"verify"}, {"checkpoint"}, {"export"}, {"tail"}, {"key"}} {
		if s.URL != "" {
			r := mustAudit(t, nil, append(args, localFlags(s, args[0])...)...)
			if r.code != 0 || r.stdout == "" {
				t.Errorf("%s on the database a daemon runs on: exit %d\nstdout: %s\nstderr: %s", args[0], r.code, r.stdout, r.stderr)
			}
			continue
		}
		start := time.Now()
		r := mustAudit(t, nil, append(args, "--data", s.Dir)...)
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s on a held store took %v", args[0], took)
		}
		if r.code != 1 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "--server") {
			t.Errorf("%s on a held store: exit %d\nstdout: %s\nstderr: %s", args[0], r.code, r.stdout, r.stderr)
		}
	}

	var first auditlog.Event
	json.Unmarshal([]byte(strings.SplitN(mustAudit(t, env, "list", "--server", d.url, "--after", "4", "--limit", "1", "-o", "jsonl").stdout, "\n", 2)[0]), &first)
	if first.Seq != 5 {
		t.Fatalf("event 5: %+v", first)
	}
	vkey := strings.TrimSpace(mustAudit(t, env, "key", "--server", d.url).stdout)
	saved := filepath.Join(t.TempDir(), "checkpoint.txt")
	os.WriteFile(saved, []byte(mustAudit(t, env, "checkpoint", "--server", d.url).stdout), 0o600)
	commands := [][]string{
		{"list"},
		{"list", "--limit", "5"},
		{"list", "--outcome", "failed", "-o", "json"},
		{"list", "--since", "1h", "--tool", "update_record", "-o", "jsonl"},
		{"list", "--principal", "agent", "--code", "RECORD_LOCKED"},
		{"show", "3"},
		{"show", first.ID, "-o", "json"},
		{"show", "12", "--key", vkey},
		{"verify"},
		{"verify", "--key", vkey, "--against", saved},
		{"checkpoint"},
		{"key"},
		{"tail", "-n", "4"},
		{"tail", "-o", "jsonl"},
		{"export"},
		{"export", "--from", "9"},
	}
	remote := make([]ran, len(commands))
	for i, args := range commands {
		remote[i] = mustAudit(t, env, append(args, "--server", d.url)...)
	}
	if code := d.Stop(); code != 0 {
		t.Fatalf("the daemon exited %d", code)
	}
	for i, args := range commands {
		local := mustAudit(t, nil, append(args, localFlags(s, args[0])...)...)
		if local.code != 0 || remote[i].code != 0 {
			t.Errorf("%v: exit %d with --data, %d with --server\n%s%s", args, local.code, remote[i].code, local.stderr, remote[i].stderr)
		}
		if local.stdout != remote[i].stdout {
			t.Errorf("%v prints differently\n--server:\n%s\n--data:\n%s", args, remote[i].stdout, local.stdout)
		}
		if local.stdout == "" {
			t.Errorf("%v prints nothing", args)
		}
	}
	// What show and verify said, once: the same from both.
	for _, want := range []struct {
		i    int
		text string
	}{
		{5, "inclusion:        included in the signed tree of size 12\n"},
		{6, `"inclusion":{"status":"included","size":12,`},
		{8, "verified 12 events against "},
		{9, "the log extends the saved checkpoint of size 12\n"},
	} {
		if !strings.Contains(remote[want.i].stdout, want.text) {
			t.Errorf("%v: stdout lacks %q:\n%s", commands[want.i], want.text, remote[want.i].stdout)
		}
	}

	// A directory with no database, or none at all, or a database with
	// no schema: an error, nothing made.
	if s.URL != "" {
		empty := testStore{Dir: t.TempDir(), URL: pgtest.Empty(t)}
		for _, args := range [][]string{{"list"}, {"show", "1"}, {"verify"}, {"checkpoint"}, {"export"}, {"tail", "--follow"}} {
			r := mustAudit(t, nil, append(args, localFlags(empty, args[0])...)...)
			if r.code != 1 || !strings.Contains(r.stderr, "does not exist or holds no writerd schema (nothing was created); writerd serve --store creates the schema in an existing database\n") {
				t.Errorf("%s on an empty database: exit %d\n%s", args[0], r.code, r.stderr)
			}
		}
		if tables := pgtest.Tables(t, empty.URL); len(tables) != 0 {
			t.Errorf("the empty database holds %v", tables)
		}
		return
	}
	empty, none := t.TempDir(), filepath.Join(t.TempDir(), "missing", "deeper")
	for _, missing := range []string{none, empty} {
		for _, args := range [][]string{{"list"}, {"show", "1"}, {"verify"}, {"checkpoint"}, {"export"}, {"tail", "--follow"}, {"key"}} {
			r := mustAudit(t, nil, append(args, "--data", missing)...)
			if r.code != 1 || !strings.Contains(r.stderr, "there is no audit log to read: <data>/writerd.db does not exist") {
				t.Errorf("%s on %s: exit %d\n%s", args[0], missing, r.code, r.stderr)
			}
		}
	}
	if _, err := os.Stat(filepath.Dir(none)); !os.IsNotExist(err) {
		t.Errorf("a missing data directory was made")
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("the empty data directory holds %v", entries)
	}
}

// tailing is a writerd audit tail --follow running, its lines as they
// come.
type tailing struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *logtest.Buffer
}

func mustStartTail(t testing.TB, env []string, args ...string) *tailing {
	t.Helper()
	tl := &tailing{lines: make(chan string, 1000), stderr: new(logtest.Buffer)}
	tl.cmd = exec.Command(binary, append([]string{"audit", "tail", "--follow"}, args...)...)
	tl.cmd.Env = testEnv(t, env...)
	tl.cmd.Stderr = tl.stderr
	out, err := tl.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tl.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			tl.lines <- sc.Text()
		}
		close(tl.lines)
	}()
	t.Cleanup(func() { tl.cmd.Process.Kill(); tl.cmd.Wait() })
	return tl
}

// mustSee reads lines until one holds each text, in order.
func (tl *tailing) mustSee(t testing.TB, texts ...string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for _, text := range texts {
		for found := false; !found; {
			select {
			case line, ok := <-tl.lines:
				if !ok {
					t.Fatalf("tail ended before %q\nstderr:\n%s", text, tl.stderr)
				}
				found = strings.Contains(line, text)
			case <-timeout:
				t.Fatalf("tail did not print %q\nstderr:\n%s", text, tl.stderr)
			}
		}
	}
}

// mustInterrupt sends SIGINT and checks tail ends with exit 0.
func (tl *tailing) mustInterrupt(t testing.TB) {
	t.Helper()
	tl.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- tl.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("tail after SIGINT: %v\nstderr:\n%s", err, tl.stderr)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("tail did not end on SIGINT")
	}
}

// Ensure tail prints the newest events, and with --follow each new one, from
// a running daemon; and from a store, the events of daemons that ran on it
// meanwhile; a data directory it lets a daemon open, saying once that one
// holds it; SIGINT ends it with exit 0.
func TestAuditTail_Follow(t *testing.T) { eachStore(t, testAuditTailFollow) }

func testAuditTailFollow(t *testing.T, kind storeKind) {
	s := kind.make(t)
	tok := mustAuditTokens(t)
	env := []string{"WRITERD_TOKEN=" + tok.auditor}
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file})
	mustWriteScript(t, d, tok.agent, "one")

	r := mustAudit(t, env, "tail", "--server", d.url, "-n", "3")
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); r.code != 0 || len(lines) != 4 ||
		!strings.HasPrefix(lines[0], "SEQ ") || !strings.HasPrefix(lines[1], "10 ") || !strings.HasPrefix(lines[3], "12 ") {
		t.Fatalf("tail -n 3: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	remote := mustStartTail(t, env, "--server", d.url, "-n", "1", "-o", "jsonl")
	remote.mustSee(t, `"idempotency_key":"one-delete-3"`)
	mustWriteScript(t, d, tok.agent, "two")
	remote.mustSee(t, `"idempotency_key":"two-create-1"`, `"idempotency_key":"two-delete-3"`)
	remote.mustInterrupt(t)
	d.Stop()

	const held = "held by a running writerd"
	local := mustStartTail(t, nil, append(s.storeFlags(), "-n", "2")...)
	local.mustSee(t, "SEQ ", "two-update-3", "two-delete-3")
	again := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file})
	for deadline := time.Now().Add(10 * time.Second); again.Do("GET", "/readyz", "").status != 200; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not open its store while tail followed it")
		}
	}
	mustWriteScript(t, again, tok.agent, "three")
	if s.URL == "" {
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(local.stderr.String(), held); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("tail did not say the store is held:\n%s", local.stderr)
			}
		}
	}
	again.Stop()
	local.mustSee(t, "three-create-1", "three-delete-3")
	local.mustInterrupt(t)
	want := 1
	if s.URL != "" {
		want = 0 // replicas share a database; nothing holds it
	}
	if n := strings.Count(local.stderr.String(), held); n != want {
		t.Errorf("tail said %d times that the store is held, want %d:\n%s", n, want, local.stderr)
	}
}
