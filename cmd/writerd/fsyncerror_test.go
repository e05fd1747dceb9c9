//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
)

// poisonLog is the message of the one line a store logs when a commit
// fails to reach its disk.
const poisonLog = "the store failed to write to its disk; writerd takes no call until it is restarted, and then its checks and writerd check decide what reached the disk"

// Ensure an EIO from fsync or from a write of the database file stops
// writes until writerd restarts: the write whose commit met it is answered
// UNAVAILABLE (retry same_key), and so is every call after it, with no
// further write or fsync of the file at all, although the file system
// takes them again (a later fsync could succeed over pages the kernel
// dropped); /readyz says not ready, with Retry-After; one line is logged.
// After a restart, every write acknowledged before the fault is there,
// none refused after it is, the write that met the fault is decided by
// its key (replayed if its commit reached the disk, run now if not), and
// writerd check and writerd audit verify pass. The faults come from a
// FUSE file system the test serves (faultfs_test.go).
func TestFsyncError_StopsWritesUntilRestart(t *testing.T) {
	for _, tt := range []struct {
		name string
		op   string
		nth  int
	}{
		{"first fsync of a commit", "fsync", 1},
		{"second fsync of a commit", "fsync", 2},
		{"first write of a commit", "write", 1},
		{"second write of a commit", "write", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ffs := mustMountFaultFS(t)
			tokens := mustAuditTokens(t)
			onMount := testStore{Dir: filepath.Join(ffs.dir, "data")}
			// The store on the mount is checked below through the backing
			// directory, once the mount is gone.
			d := MustStartHTTP(t, httpConfig{store: onMount, tokens: tokens.file, damaged: true})

			create := func(d *httpDaemon, key string) reply {
				return d.API(tokens.agent, "create_project", key, fmt.Sprintf(`{"name":%q}`, key))
			}
			var acked []string
			for i := range 5 {
				key := fmt.Sprintf("before-%04d", i)
				if r := create(d, key); r.status != 201 {
					t.Fatalf("%s: %d %s", key, r.status, r.body)
				}
				acked = append(acked, key)
			}

			ffs.arm(tt.op, tt.nth)
			const faulted = "faulted-0001"
			r := create(d, faulted)
			if failed, _ := ffs.state(); !failed {
				t.Fatalf("the write did not meet the fault: %d %s", r.status, r.body)
			}
			mustBePoisoned(t, "the write that met the fault", r)

			// Every call after it is refused without touching the file.
			var refused []string
			for i := range 3 {
				key := fmt.Sprintf("after-%04d", i)
				mustBePoisoned(t, key, create(d, key))
				refused = append(refused, key)
			}
			mustBePoisoned(t, "a read", d.API(tokens.agent, "list_projects", "", `{}`))
			mustBePoisoned(t, "the retry of the write that met the fault", create(d, faulted))
			mustRetryAfter(t, "/readyz", d.Do("GET", "/readyz", ""))
			if _, after := ffs.state(); after != 0 {
				t.Fatalf("%d writes or fsyncs of the file after the fault, want none", after)
			}
			if code := d.Stop(); code != 0 {
				t.Errorf("serve exited %d after SIGTERM\n%s", code, d.stderr)
			}
			if _, after := ffs.state(); after != 0 {
				t.Fatalf("%d writes or fsyncs of the file after the fault, by the shutdown; want none", after)
			}
			mustLogPoisonOnce(t, d.stderr.String())
			if strings.Contains(d.stderr.String(), ffs.dir) {
				t.Fatalf("the log names the data directory:\n%s", d.stderr)
			}

			// A restart opens the file again: the retry with the same key
			// is decided by what reached the disk.
			again := MustStartHTTP(t, httpConfig{store: onMount, tokens: tokens.file, damaged: true})
			retry := create(again, faulted)
			if retry.status/100 != 2 {
				t.Fatalf("the retry after the restart: %d %s", retry.status, retry.body)
			}
			reached := retry.header.Get("Idempotent-Replayed") == "true"
			if code := again.Stop(); code != 0 {
				t.Errorf("the restarted serve exited %d\n%s", code, again.stderr)
			}
			ffs.mustUnmount(t)

			backing := testStore{Dir: filepath.Join(ffs.backing, "data")}
			s := MustOpenStore(t, backing)
			for _, key := range acked {
				if rec := s.record("agent", key); rec == nil {
					t.Errorf("acknowledged write %s is gone", key)
				}
			}
			for _, key := range refused {
				if rec := s.record("agent", key); rec != nil || len(s.eventsFor(key)) != 0 {
					t.Errorf("write %s, refused after the fault, is there", key)
				}
			}
			if n := len(s.eventsFor(faulted)); n != 1 {
				t.Errorf("the write that met the fault has %d audit events, want 1", n)
			}
			if n, want := s.projects(), len(acked)+1; n != want {
				t.Errorf("%d projects, want %d", n, want)
			}
			for _, e := range s.events() {
				if e.Outcome != auditlog.OK {
					t.Errorf("event %d: %s %s, want none failed", e.Seq, e.Outcome, e.Code)
				}
			}
			s.s.Close()
			t.Logf("the commit that met the fault reached the disk: %v", reached)
			mustCheck(t, backing)
			mustVerifyPasses(t, backing.auditFlags()...)
		})
	}
}

// mustBePoisoned asserts the answer of a poisoned store: 503 UNAVAILABLE,
// retry same_key, its sentence, and Retry-After.
func mustBePoisoned(t testing.TB, what string, r reply) {
	t.Helper()
	var e envelope
	json.Unmarshal([]byte(r.body), &e)
	if r.status != 503 || e.Error.Code != "UNAVAILABLE" || e.Error.Retry != "same_key" || e.Error.Message != bolt.PoisonedMessage {
		t.Fatalf("%s: %d %s; want 503 UNAVAILABLE, same_key, %q", what, r.status, r.body, bolt.PoisonedMessage)
	}
	mustRetryAfter(t, what, r)
}

// mustLogPoisonOnce asserts that the log holds the store's line exactly
// once, at level ERROR, with the I/O error as its cause; and no other
// error line but the one line of each refused call.
func mustLogPoisonOnce(t testing.TB, log string) {
	t.Helper()
	n := 0
	for _, line := range strings.Split(log, "\n") {
		var l struct{ Level, Msg, Cause, Code string }
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch {
		case l.Msg == poisonLog:
			n++
			if l.Level != "ERROR" || !strings.HasPrefix(l.Cause, "boltdb: commit: ") || !strings.Contains(l.Cause, "input/output error") {
				t.Errorf("the store's line: %s", line)
			}
		case l.Level == "ERROR" && (l.Msg != "call" || l.Code != "UNAVAILABLE"):
			t.Errorf("an error line besides the store's and the refused calls': %s", line)
		}
	}
	if n != 1 {
		t.Fatalf("the store's line is logged %d times, want once:\n%s", n, log)
	}
}

// Ensure a poisoned store (a commit met an EIO from fsync) is not backed
// up: its mapping may show pages that never reached the disk. The backup
// route answers 503 UNAVAILABLE with the store's sentence, and writerd
// backup --server exits 1 and leaves -o as it was, no temporary file
// beside it.
func TestBackup_PoisonedStoreRefused(t *testing.T) {
	ffs := mustMountFaultFS(t)
	tokens := mustAuditTokens(t)
	admin := mustToken(t, tokens.file, "backup", pipeline.ScopeAdmin)
	onMount := testStore{Dir: filepath.Join(ffs.dir, "data")}
	d := MustStartHTTP(t, httpConfig{store: onMount, tokens: tokens.file, damaged: true})
	if r := d.API(tokens.agent, "create_project", "before-0001", `{"name":"before"}`); r.status != 201 {
		t.Fatalf("a write before the fault: %d %s", r.status, r.body)
	}
	if r := d.Do("GET", "/v1/admin/backup", "", "Authorization", "Bearer "+admin); r.status != 200 {
		t.Fatalf("the backup before the fault: %d", r.status)
	}
	ffs.arm("fsync", 1)
	mustBePoisoned(t, "the write that met the fault", d.API(tokens.agent, "create_project", "faulted-0001", `{"name":"faulted"}`))

	r := d.Do("GET", "/v1/admin/backup", "", "Authorization", "Bearer "+admin)
	if r.status == 200 {
		t.Fatalf("the backup route backed the poisoned store up: 200, %d bytes", len(r.body))
	}
	mustBePoisoned(t, "the backup route", r)
	dir := t.TempDir()
	out := filepath.Join(dir, "writerd.db")
	if err := os.WriteFile(out, []byte("the backup of yesterday"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "backup.token")
	if err := os.WriteFile(tokenFile, []byte(admin), 0o600); err != nil {
		t.Fatal(err)
	}
	b := mustRunWith(t, runConfig{}, "backup", "--server", d.url, "--token-file", tokenFile, "-o", out)
	if b.code != 1 || !strings.Contains(b.stderr, "The store failed to write to its disk") {
		t.Errorf("writerd backup of the poisoned store: exit %d\n%s%s", b.code, b.stdout, b.stderr)
	}
	if got := mustReadFile(t, out); got != "the backup of yesterday" {
		t.Errorf("-o was written: %d bytes", len(got))
	}
	mustHoldOnly(t, dir, "backup.token", "writerd.db")
	if _, after := ffs.state(); after != 0 {
		t.Errorf("%d writes or fsyncs of the file after the fault, want none", after)
	}
	d.Stop()
}
