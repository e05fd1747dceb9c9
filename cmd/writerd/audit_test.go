package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// auditTokens are the tokens of a daemon that audit tests run: one that
// writes and one that reads the audit log.
type auditTokens struct {
	file, agent, auditor string
}

// mustAuditTokens makes a tokens file with an agent (read, write) and an
// auditor (audit only).
func mustAuditTokens(t testing.TB) auditTokens {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tokens.json")
	return auditTokens{
		file:    file,
		agent:   mustToken(t, file, "agent", pipeline.ScopeRead|pipeline.ScopeWrite),
		auditor: mustToken(t, file, "auditor", pipeline.ScopeAudit),
	}
}

// mustWrite calls a tool over the direct API and returns the id of the
// entity its answer names ("" for a failure, whose code must be fail).
func mustWrite(t testing.TB, d *httpDaemon, token, tool, key, body, fail string) string {
	t.Helper()
	r := d.API(token, tool, key, body)
	if fail != "" {
		if r.errorCode() != fail {
			t.Fatalf("%s %s: %d %s, want %s", tool, key, r.status, r.body, fail)
		}
		return ""
	}
	var answer map[string]struct {
		ID string `json:"id"`
	}
	if r.status/100 != 2 || json.Unmarshal([]byte(r.body), &answer) != nil {
		t.Fatalf("%s %s: %d %s", tool, key, r.status, r.body)
	}
	for _, v := range answer {
		return v.ID
	}
	return ""
}

// auditScriptEvents is how many events mustWriteScript leaves.
const auditScriptEvents = 12

// mustWriteScript runs a scripted set of writes over the direct API: eight
// that succeed and four refused (each an audit event), across two
// projects and two records; keys and names start with prefix.
func mustWriteScript(t testing.TB, d *httpDaemon, token, prefix string) {
	t.Helper()
	w := func(tool, key, body, fail string) string {
		t.Helper()
		return mustWrite(t, d, token, tool, prefix+"-"+key, body, fail)
	}
	p1 := w("create_project", "create-1", `{"name":"`+prefix+`-alpha"}`, "")
	p2 := w("create_project", "create-2", `{"name":"`+prefix+`-beta"}`, "")
	w("create_project", "create-3", `{"name":"`+prefix+`-alpha"}`, "ALREADY_EXISTS")
	r1 := w("create_record", "record-1", `{"project_id":"`+p1+`","title":"one"}`, "")
	r2 := w("create_record", "record-2", `{"project_id":"`+p1+`","title":"two"}`, "")
	w("update_record", "update-1", `{"project_id":"`+p1+`","record_id":"`+r1+`","expected_revision":1,"title":"one, again"}`, "")
	w("update_record", "update-2", `{"project_id":"`+p1+`","record_id":"`+r1+`","expected_revision":1,"title":"stale"}`, "REVISION_CONFLICT")
	w("update_record", "lock-1", `{"project_id":"`+p1+`","record_id":"`+r2+`","expected_revision":1,"locked":true}`, "")
	w("delete_record", "delete-1", `{"project_id":"`+p1+`","record_id":"`+r2+`","confirm":true}`, "RECORD_LOCKED")
	w("delete_record", "delete-2", `{"project_id":"`+p1+`","record_id":"`+r1+`","confirm":true}`, "")
	w("update_project", "update-3", `{"project_id":"`+p2+`","expected_revision":1,"description":"the second"}`, "")
	w("delete_project", "delete-3", `{"project_id":"`+p1+`","confirm":true}`, "PROJECT_NOT_EMPTY")
}

// mustAuditLog runs a daemon on s through the script, stops it (which
// signs the last checkpoint) and returns s.
func mustAuditLog(t testing.TB, s testStore, prefix string, args ...string) testStore {
	t.Helper()
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file, args: args})
	mustWriteScript(t, d, tok.agent, prefix)
	if code := d.Stop(); code != 0 {
		t.Fatalf("the daemon exited %d:\n%s", code, d.stderr)
	}
	return s
}

// mustWaitCheckpoint waits until the daemon's latest checkpoint signs a
// log of at least size events. Where nothing writes meanwhile, that is a
// checkpoint of exactly size events.
func mustWaitCheckpoint(t testing.TB, d *httpDaemon, token string, size uint64, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		r := d.Do("GET", "/v1/audit/checkpoint", "", "Authorization", "Bearer "+token)
		// A checkpoint's second line is the log's size (C2SP
		// tlog-checkpoint: origin, size, root hash, a blank line, then
		// the signature).
		if lines := strings.Split(r.body, "\n"); r.status == 200 && len(lines) > 2 {
			if n, err := strconv.ParseUint(lines[1], 10, 64); err == nil && n >= size {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint of %d events or more within %v: %d %s", size, within, r.status, r.body)
		}
	}
}

// mustAudit runs writerd audit with args; the data directory and server,
// if any, are in args.
func mustAudit(t testing.TB, env []string, args ...string) ran {
	t.Helper()
	r := mustRunWith(t, runConfig{env: env}, append([]string{"audit"}, args...)...)
	mustNotFault(t, r.stderr)
	return r
}

// seeded is an event of a seeded log: its time as an age, and its fields.
type seeded struct {
	age                               time.Duration
	tool, principal, outcome, code, k string
	targets                           []auditlog.Target
}

// mustSeedLog writes events into a new store of kind in process, with the
// times given as ages before now, and signs checkpoints of the sizes given
// with a key in the store's key file, as serve would. Their targets are of
// kinds no built-in tool has, so that writerd check passes.
func mustSeedLog(t testing.TB, kind storeKind, now time.Time, events []seeded, checkpointsAt ...uint64) testStore {
	t.Helper()
	return mustSeedLogWith(t, kind, "", now, events, checkpointsAt...)
}

// mustSeedLogWith is mustSeedLog signing with the key in keyFile, made
// there if missing ("": the store's key file).
func mustSeedLogWith(t testing.TB, kind storeKind, keyFile string, now time.Time, events []seeded, checkpointsAt ...uint64) testStore {
	t.Helper()
	ts := kind.make(t)
	if keyFile == "" {
		keyFile = ts.keyFile()
	}
	// A log's own origin: the daemon keeps what it signed by origin.
	key, err := auditlog.LoadKey(keyFile, daemon.NewLogOrigin(), true)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ts.config()
	if ts.URL != "" {
		cfg.Origin = key.Signer.Name()
	}
	s, err := daemon.OpenStore(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Update(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
		log := tx.Audit()
		for i, s := range events {
			e := &auditlog.Event{
				Time: now.Add(-s.age), RequestID: fmt.Sprintf("req-%02d", i+1), Principal: s.principal,
				Transport: "http", Tool: s.tool, IdempotencyKey: s.k, Digest: strings.Repeat("ab", 32),
				Outcome: s.outcome, Code: s.code, Targets: s.targets, DurationMS: 1.5,
			}
			if s.code != "" {
				e.Status = 409
			}
			if err := log.Append(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Signed after the events' transaction, in views that see them
	// numbered: a backend may number an event after its transaction
	// (PostgreSQL's sequencer).
	signed := map[uint64][]byte{}
	err = s.View(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
		log := tx.Audit()
		for _, size := range checkpointsAt {
			root, err := auditlog.TreeHash(log, size)
			if err != nil {
				return err
			}
			if signed[size], err = (auditlog.Checkpoint{Origin: key.Signer.Name(), Size: size, Root: root}).Sign(key.Signer); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = s.Update(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
			for size, note := range signed {
				if err := tx.Audit().PutCheckpoint(size, note); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// mustShare returns a store for a daemon to serve beside a command that
// opens s: a copy of a data directory, which one process holds at a
// time, or the same PostgreSQL database, which replicas share.
func mustShare(t testing.TB, s testStore) testStore {
	t.Helper()
	if s.URL != "" {
		return s
	}
	return mustCopyStore(t, s)
}

// mustCopyStore copies the store of a stopped daemon, its key file with
// it: the data directory, or the database and the directory of its key.
func mustCopyStore(t testing.TB, s testStore) testStore {
	t.Helper()
	c := testStore{Dir: mustCopyDir(t, s.Dir)}
	if s.URL != "" {
		c.URL = pgtest.Copy(t, s.URL)
	}
	return c
}

// mustCopyDir copies a data directory of a stopped daemon (its files, not
// its subdirectories) into a new one, keeping their modes.
func mustCopyDir(t testing.TB, dir string) string {
	t.Helper()
	to := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

func widget(id string, rev int64) auditlog.Target {
	return auditlog.Target{Kind: "widget", ID: id, Revision: rev}
}
func gadget(id string, rev int64) auditlog.Target {
	return auditlog.Target{Kind: "gadget", ID: id, Revision: rev}
}

// seqsOf returns the sequence numbers of list -o jsonl's output.
func seqsOf(t testing.TB, jsonl string) []uint64 {
	t.Helper()
	seqs := []uint64{}
	for line := range strings.SplitSeq(strings.TrimSuffix(jsonl, "\n"), "\n") {
		if line == "" {
			continue
		}
		var e auditlog.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("not an event: %q", line)
		}
		seqs = append(seqs, e.Seq)
	}
	return seqs
}

// The first line of each audit usage.
const (
	auditUsageLine      = "usage: writerd audit <command> [--server URL | --data DIR | --store URL] [flags]"
	auditListUsageLine  = "usage: writerd audit list [--server URL | --data DIR | --store URL] [filters] [--limit N] [--after CURSOR] [-o table|json|jsonl]"
	auditShowUsageLine  = "usage: writerd audit show ID|SEQ [--server URL | --data DIR | --store URL] [--key KEY] [-o table|json]"
	auditVerifyUsageLn  = "usage: writerd audit verify [--server URL | --data DIR | --store URL | --export FILE] [--key KEY] [--against FILE]... [--witness VKEY... [--quorum N]] [-o text|json]"
	auditExportUsageLn  = "usage: writerd audit export [--server URL | --data DIR | --store URL] [--from SEQ] [-o FILE]"
	auditTailUsageLine  = "usage: writerd audit tail [--server URL | --data DIR | --store URL] [-n 10] [--follow] [-o table|jsonl]"
	auditKeyUsageLine   = "usage: writerd audit key [--server URL | --data DIR [--audit-key FILE] | --store URL --audit-key FILE] [-o text|json]"
	auditCheckUsageLine = "usage: writerd audit checkpoint [--server URL [--now] | --data DIR | --store URL] [-o text|json]"
	auditPublishUsageLn = "usage: writerd audit publish --dir DIR [--server URL | --data DIR | --store URL] [--key KEY]"
)

var auditUsageLines = []string{mainUsageLine, auditUsageLine, auditListUsageLine, auditShowUsageLine,
	auditVerifyUsageLn, auditExportUsageLn, auditTailUsageLine, auditKeyUsageLine, auditCheckUsageLine, auditPublishUsageLn}

// Ensure writerd audit keeps the command line's conventions: help asked
// for goes to stdout with exit 0, for the whole and for each command; a
// usage error prints one sentence and the command's usage, once, to
// stderr with exit 2; nothing is opened before the flags are right.
func TestAudit_HelpAndUsageErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		name   string
		args   []string
		code   int
		usage  string
		stderr string
	}{
		{"help audit", []string{"help", "audit"}, 0, auditUsageLine, ""},
		{"audit help", []string{"audit", "help"}, 0, auditUsageLine, ""},
		{"audit -h", []string{"audit", "-h"}, 0, auditUsageLine, ""},
		{"audit help list", []string{"audit", "help", "list"}, 0, auditListUsageLine, ""},
		{"audit list -h", []string{"audit", "list", "-h"}, 0, auditListUsageLine, ""},
		{"audit show --help", []string{"audit", "show", "--help"}, 0, auditShowUsageLine, ""},
		{"audit help verify", []string{"audit", "help", "verify"}, 0, auditVerifyUsageLn, ""},
		{"audit help export", []string{"audit", "help", "export"}, 0, auditExportUsageLn, ""},
		{"audit tail -h", []string{"audit", "tail", "-h"}, 0, auditTailUsageLine, ""},
		{"audit key -h", []string{"audit", "key", "-h"}, 0, auditKeyUsageLine, ""},
		{"audit checkpoint -h", []string{"audit", "checkpoint", "-h"}, 0, auditCheckUsageLine, ""},
		{"audit help publish", []string{"audit", "help", "publish"}, 0, auditPublishUsageLn, ""},
		{"publish without a directory", []string{"audit", "publish", "--data", missing}, 2, auditPublishUsageLn, "writerd audit publish: --dir is required: the directory to publish the tiles in"},
		{"publish to a relative directory", []string{"audit", "publish", "--dir", "site"}, 2, auditPublishUsageLn, "writerd audit publish: --dir takes an absolute path, such as /srv/tiles or ~/writerd-tiles, not a relative one"},

		{"no command", []string{"audit"}, 2, auditUsageLine, "writerd audit: no command given: list, show, verify, checkpoint, export, publish, tail, key"},
		{"unknown command", []string{"audit", "lst"}, 2, auditUsageLine, `writerd audit: unknown command "lst": list, show, verify, checkpoint, export, publish, tail, key`},
		{"a flag first", []string{"audit", "--data", missing, "list"}, 2, auditUsageLine, "writerd audit: the command comes first: writerd audit <command> [flags], a command of list, show, verify, checkpoint, export, publish, tail, key"},
		{"help for two", []string{"audit", "help", "list", "show"}, 2, auditUsageLine, "writerd audit: help takes one of list, show, verify, checkpoint, export, publish, tail, key"},
		{"unknown flag", []string{"audit", "list", "--verbose"}, 2, auditListUsageLine, "writerd audit list: unknown flag -verbose"},
		{"an argument to list", []string{"audit", "list", "7"}, 2, auditListUsageLine, `writerd audit list: unexpected argument "7"`},
		{"limit zero", []string{"audit", "list", "--limit", "0"}, 2, auditListUsageLine, "writerd audit list: --limit takes a positive number of events, such as 50"},
		{"a cursor that is not one", []string{"audit", "list", "--after", "next"}, 2, auditListUsageLine, "writerd audit list: --after takes a cursor: the sequence number a previous page named"},
		{"a time that is not one", []string{"audit", "list", "--since", "yesterday"}, 2, auditListUsageLine, "writerd audit list: --since takes " + whenForm},
		{"an age without a unit", []string{"audit", "list", "--until", "7"}, 2, auditListUsageLine, "writerd audit list: --until takes " + whenForm},
		{"since after until", []string{"audit", "list", "--since", "1h", "--until", "2h"}, 2, auditListUsageLine, "writerd audit list: --since is not before --until: no event can match"},
		{"an outcome unknown", []string{"audit", "list", "--outcome", "refused"}, 2, auditListUsageLine, "writerd audit list: --outcome takes ok, failed or unknown"},
		{"a format unknown", []string{"audit", "list", "-o", "yaml"}, 2, auditListUsageLine, "writerd audit list: -o takes table, json or jsonl"},
		{"both sources", []string{"audit", "list", "--data", missing, "--server", "http://127.0.0.1:1"}, 2, auditListUsageLine, "writerd audit list: --server and --data each name where the log is read; give one of them"},
		{"a server that is no URL", []string{"audit", "list", "--server", "127.0.0.1:7070"}, 2, auditListUsageLine, "writerd audit list: --server takes the daemon's URL, such as http://127.0.0.1:7070"},
		{"a relative data directory", []string{"audit", "list", "--data", "writerd"}, 2, auditListUsageLine, "writerd audit list: --data takes an absolute path, such as /var/lib/writerd or ~/writerd, not a relative one"},
		{"the key of a store without its file", []string{"audit", "key", "--store", "postgres://writerd@127.0.0.1:1/writerd"}, 2, auditKeyUsageLine,
			"writerd audit key: a PostgreSQL store keeps no key beside it: give the replicas' key file with --audit-key"},
		{"a token file for a data directory", []string{"audit", "list", "--data", missing, "--token-file", "/tmp/t"}, 2, auditListUsageLine, "writerd audit list: --token-file is for --server; a data directory is read without a token"},
		{"show without an event", []string{"audit", "show", "--data", missing}, 2, auditShowUsageLine, "writerd audit show: no event given: show takes an event's id (a ULID) or its sequence number"},
		{"show with two", []string{"audit", "show", "1", "2"}, 2, auditShowUsageLine, `writerd audit show: unexpected argument "2": show takes one event`},
		{"show of a name", []string{"audit", "show", "latest"}, 2, auditShowUsageLine, "writerd audit show: show takes an event's id (a ULID, such as 01KBBM8Y3E6W5XG0M2J7Q4T9RS) or its sequence number (from 1)"},
		{"show of zero", []string{"audit", "show", "0", "--data", missing}, 2, auditShowUsageLine, "writerd audit show: show takes an event's id (a ULID, such as 01KBBM8Y3E6W5XG0M2J7Q4T9RS) or its sequence number (from 1)"},
		{"an audit key with a server", []string{"audit", "show", "1", "--server", "http://127.0.0.1:1", "--audit-key", "/tmp/k"}, 2, auditShowUsageLine, "writerd audit show: --audit-key reads a data directory's key file; with --server the log's key comes from the daemon, or give --key"},
		{"verify an export and a directory", []string{"audit", "verify", "--export", "/tmp/e.jsonl", "--data", missing}, 2, auditVerifyUsageLn, "writerd audit verify: --export verifies a file offline, so it takes no --data"},
		{"export from zero", []string{"audit", "export", "--from", "0"}, 2, auditExportUsageLn, "writerd audit export: --from takes a sequence number, from 1"},
		{"tail of none", []string{"audit", "tail", "-n", "0"}, 2, auditTailUsageLine, "writerd audit tail: -n 0 prints no event: give a positive number, such as 10, or --follow to print only the new events"},
		{"tail of fewer than none", []string{"audit", "tail", "-n", "-1", "--follow"}, 2, auditTailUsageLine, "writerd audit tail: -n takes a number of events, such as 10, or 0 with --follow for only new ones"},
		{"tail as json", []string{"audit", "tail", "-o", "json"}, 2, auditTailUsageLine, "writerd audit tail: -o takes table or jsonl"},
		{"key with --key", []string{"audit", "key", "--key", "x"}, 2, auditKeyUsageLine, "writerd audit key: unknown flag -key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, tt.args...)
			mustFollowUsage(t, r, tt.code, tt.usage, tt.stderr, auditUsageLines...)
		})
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("a usage error made the data directory: %v", err)
	}
}

// Ensure list's filters select exactly the events they name, alone and
// combined, with absolute and relative times, from a data directory and
// from the daemon serving it alike; a variable meant for another command
// (WRITERD_PRINCIPAL is serve's) filters nothing, and one that is no
// audit flag's value (WRITERD_SINCE=last week) stops nothing.
func TestAuditList_Filters(t *testing.T) { eachStore(t, testAuditListFilters) }

func testAuditListFilters(t *testing.T, kind storeKind) {
	now := time.Now()
	seeded := mustSeedLog(t, kind, now, []seeded{
		{240 * time.Hour, "create_project", "alice", "ok", "", "k-alice-0001", []auditlog.Target{widget("W1", 1)}},
		{216 * time.Hour, "create_project", "bob", "ok", "", "k-bob-00001", []auditlog.Target{widget("W2", 1)}},
		{192 * time.Hour, "update_record", "alice", "failed", "REVISION_CONFLICT", "k-alice-0002", []auditlog.Target{widget("W1", 1)}},
		{144 * time.Hour, "update_record", "alice", "ok", "", "k-alice-0003", []auditlog.Target{widget("W1", 2)}},
		{72 * time.Hour, "create_record", "carol", "ok", "", "k-carol-0001", []auditlog.Target{gadget("G1", 1)}},
		{48 * time.Hour, "delete_record", "bob", "failed", "NOT_FOUND", "k-bob-00002", []auditlog.Target{widget("W9", 0)}},
		{24 * time.Hour, "update_record", "bob", "ok", "", "k-bob-00003", []auditlog.Target{widget("W2", 2), gadget("G1", 2)}},
		{5 * time.Hour, "update_record", "alice", "failed", "RECORD_LOCKED", "k-alice-0004", []auditlog.Target{widget("W2", 2)}},
		{3 * time.Hour, "delete_record", "carol", "ok", "", "k-carol-0002", []auditlog.Target{widget("W1", 3)}},
		{90 * time.Minute, "create_project", "alice", "ok", "", "k-alice-0005", []auditlog.Target{widget("W3", 1)}},
		{40 * time.Minute, "update_record", "carol", "failed", "REVISION_CONFLICT", "k-carol-0003", []auditlog.Target{widget("W3", 1)}},
		{10 * time.Minute, "create_record", "bob", "ok", "", "k-bob-00004", []auditlog.Target{gadget("G2", 1)}},
	}, 8, 12)
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{store: mustShare(t, seeded), tokens: tok.file})
	sources := map[string][]string{"data": seeded.storeFlags(), "server": {"--server", d.url}}
	env := []string{"WRITERD_TOKEN=" + tok.auditor}

	tests := []struct {
		name string
		args []string
		want []uint64
	}{
		{"none", nil, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{"tool", []string{"--tool", "update_record"}, []uint64{3, 4, 7, 8, 11}},
		{"principal", []string{"--principal", "alice"}, []uint64{1, 3, 4, 8, 10}},
		{"outcome failed", []string{"--outcome", "failed"}, []uint64{3, 6, 8, 11}},
		{"outcome ok", []string{"--outcome", "ok"}, []uint64{1, 2, 4, 5, 7, 9, 10, 12}},
		{"code", []string{"--code", "REVISION_CONFLICT"}, []uint64{3, 11}},
		{"key", []string{"--key", "k-bob-00003"}, []uint64{7}},
		{"target", []string{"--target", "W1"}, []uint64{1, 3, 4, 9}},
		{"a second target", []string{"--target", "G1"}, []uint64{5, 7}},
		{"request id", []string{"--request-id", "req-08"}, []uint64{8}},
		{"since an age in hours", []string{"--since", "2h"}, []uint64{10, 11, 12}},
		{"since an age in days", []string{"--since", "7d"}, []uint64{4, 5, 6, 7, 8, 9, 10, 11, 12}},
		{"since an age in minutes", []string{"--since", "60m"}, []uint64{11, 12}},
		{"until an age", []string{"--until", "30h"}, []uint64{1, 2, 3, 4, 5, 6}},
		{"since a time", []string{"--since", now.Add(-100 * time.Hour).Format(time.RFC3339)}, []uint64{5, 6, 7, 8, 9, 10, 11, 12}},
		{"until a time", []string{"--until", now.Add(-100 * time.Hour).Format(time.RFC3339Nano)}, []uint64{1, 2, 3, 4}},
		{"a window of ages", []string{"--since", "50h", "--until", "2h"}, []uint64{6, 7, 8, 9}},
		{"principal and outcome", []string{"--principal", "alice", "--outcome", "failed"}, []uint64{3, 8}},
		{"tool, outcome and an age", []string{"--tool", "update_record", "--outcome", "ok", "--since", "7d"}, []uint64{4, 7}},
		{"principal and target", []string{"--principal", "bob", "--target", "W2"}, []uint64{2, 7}},
		{"code, principal and an age", []string{"--code", "REVISION_CONFLICT", "--principal", "carol", "--since", "1h"}, []uint64{11}},
		{"every filter", []string{"--since", "6h", "--until", "4h", "--tool", "update_record", "--principal", "alice", "--outcome", "failed",
			"--code", "RECORD_LOCKED", "--key", "k-alice-0004", "--target", "W2", "--request-id", "req-08"}, []uint64{8}},
		{"one filter of several misses", []string{"--principal", "alice", "--code", "NOT_FOUND"}, []uint64{}},
		{"no such principal", []string{"--principal", "dave"}, []uint64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tables []string
			for _, name := range []string{"data", "server"} {
				args := append(append([]string{"list"}, sources[name]...), tt.args...)
				r := mustAudit(t, append(env, "WRITERD_PRINCIPAL=nobody", "WRITERD_LIMIT=1", "WRITERD_SINCE=last week"), append(args, "-o", "jsonl")...)
				if r.code != 0 || r.stderr != "" {
					t.Fatalf("%s: exit %d\n%s", name, r.code, r.stderr)
				}
				if got := seqsOf(t, r.stdout); !slices.Equal(got, tt.want) {
					t.Errorf("%s: events %v, want %v", name, got, tt.want)
				}
				tables = append(tables, mustAudit(t, env, args...).stdout)
			}
			if tables[0] != tables[1] {
				t.Errorf("the tables differ:\n--data:\n%s--server:\n%s", tables[0], tables[1])
			}
			if n := strings.Count(tables[0], "\n"); n != len(tt.want)+1 {
				t.Errorf("the table has %d lines, want the header and %d events:\n%s", n, len(tt.want), tables[0])
			}
		})
	}
}

// Ensure pages follow each other without losing or repeating an event:
// the command list prints on stderr for the next page is one to run, the
// ages in it written as the times they meant, and the last page prints
// none; -o json carries the same cursor.
func TestAuditList_Cursor(t *testing.T) { eachStore(t, testAuditListCursor) }

func testAuditListCursor(t *testing.T, kind storeKind) {
	now := time.Now()
	var events []seeded
	for i := range 23 {
		s := seeded{time.Duration(30-i) * time.Hour, "update_widget", []string{"alice", "bob"}[i%2], "ok", "", fmt.Sprintf("k-%08d", i), []auditlog.Target{widget("W1", int64(i+1))}}
		if i%3 == 0 {
			s.outcome, s.code = "failed", "REVISION_CONFLICT"
		}
		events = append(events, s)
	}
	seeded := mustSeedLog(t, kind, now, events, 23)
	tok := mustAuditTokens(t)
	d := MustStartHTTP(t, httpConfig{store: mustShare(t, seeded), tokens: tok.file})
	env := []string{"WRITERD_TOKEN=" + tok.auditor}

	for _, tt := range []struct {
		name   string
		filter []string
		limit  int
		want   int // events in all
	}{
		{"every event, pages of 5", nil, 5, 23},
		{"pages that end full", []string{"--principal", "bob"}, 11, 11},
		{"a filter and an age, pages of 3", []string{"--principal", "alice", "--since", "20h", "--outcome", "ok"}, 3, 4},
		{"one page", []string{"--principal", "alice"}, 50, 12},
	} {
		for _, source := range [][]string{seeded.storeFlags(), {"--server", d.url}} {
			t.Run(tt.name+" "+source[0], func(t *testing.T) {
				args := append(append(append([]string{"audit", "list"}, source...), tt.filter...), "--limit", strconv.Itoa(tt.limit))
				all := mustAudit(t, env, append(append([]string{"list"}, source...), append(tt.filter, "--limit", "1000", "-o", "jsonl")...)...)
				want := seqsOf(t, all.stdout)
				if len(want) != tt.want {
					t.Fatalf("the filter selects %d events, want %d", len(want), tt.want)
				}
				var got []uint64
				for page := 0; ; page++ {
					if page > 30 {
						t.Fatal("the pages do not end")
					}
					cmd := exec.Command(binary, append(args, "-o", "jsonl")...)
					cmd.Env = testEnv(t, env...)
					var stdout, stderr strings.Builder
					cmd.Stdout, cmd.Stderr = &stdout, &stderr
					if err := cmd.Run(); err != nil {
						t.Fatalf("page %d: %v\n%s", page, err, stderr.String())
					}
					seqs := seqsOf(t, stdout.String())
					if len(seqs) > tt.limit {
						t.Fatalf("page %d has %d events, more than --limit %d", page, len(seqs), tt.limit)
					}
					got = append(got, seqs...)
					next, ok := strings.CutPrefix(stderr.String(), "next: writerd audit list ")
					if !ok {
						if stderr.String() != "" {
							t.Fatalf("the last page's stderr: %q", stderr.String())
						}
						break
					}
					next = strings.TrimSuffix(next, "\n")
					if strings.Contains(next, "--since 20h") {
						t.Errorf("the next page's command keeps an age: %s", next)
					}
					if !strings.HasSuffix(next, fmt.Sprintf(" --after %d", seqs[len(seqs)-1])) {
						t.Errorf("the next page's command %q does not end at --after %d", next, seqs[len(seqs)-1])
					}
					// Run the command as printed (less the format, added again).
					args = append([]string{"audit", "list"}, shellWords(t, next)...)
					args = slices.DeleteFunc(args, func(a string) bool { return a == "-o" || a == "jsonl" })
				}
				if !slices.Equal(got, want) {
					t.Errorf("the pages hold %v, want %v", got, want)
				}
			})
		}
	}

	// -o json names the same cursor.
	r := mustAudit(t, nil, append([]string{"list", "--limit", "5", "-o", "json"}, seeded.storeFlags()...)...)
	var page struct {
		Events []auditlog.Event `json:"events"`
		Next   string           `json:"next"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Events) != 5 || page.Next != "5" || r.stderr != "" {
		t.Fatalf("-o json: %v %+v, stderr %q", err, page, r.stderr)
	}
	r = mustAudit(t, nil, append([]string{"list", "--after", "20", "-o", "json"}, seeded.storeFlags()...)...)
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Events) != 3 || strings.Contains(r.stdout, `"next"`) {
		t.Fatalf("-o json, last page: %v %s", err, r.stdout)
	}
}

// shellWords splits a command line as list prints it: words, some in
// single quotes.
func shellWords(t testing.TB, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quotes: %s", s)
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// Ensure show says whether the signed tree holds an event: included,
// after the latest checkpoint, or no checkpoint yet; and verify names the
// events no signature covers yet.
func TestAuditShow_Inclusion(t *testing.T) { eachStore(t, testAuditShowInclusion) }

func testAuditShowInclusion(t *testing.T, kind storeKind) {
	now := time.Now()
	events := []seeded{
		{5 * time.Hour, "create_widget", "alice", "ok", "", "k-00000001", []auditlog.Target{widget("W1", 1)}},
		{4 * time.Hour, "update_widget", "alice", "ok", "", "k-00000002", []auditlog.Target{widget("W1", 2)}},
		{3 * time.Hour, "update_widget", "bob", "failed", "REVISION_CONFLICT", "k-00000003", []auditlog.Target{widget("W1", 2)}},
		{2 * time.Hour, "create_widget", "bob", "ok", "", "k-00000004", nil},
		{1 * time.Hour, "update_widget", "bob", "ok", "", "k-00000005", []auditlog.Target{widget("W1", 3)}},
	}
	signed := mustSeedLog(t, kind, now, events, 3)
	unsigned := mustSeedLog(t, kind, now, events)
	for _, tt := range []struct {
		store             testStore
		ref, status, line string
	}{
		{signed, "2", "included", "inclusion:        included in the signed tree of size 3\n"},
		{signed, "3", "included", "code:             REVISION_CONFLICT\nstatus:           409\n"},
		{signed, "4", "after_checkpoint", "targets:          -\n"},
		{signed, "5", "after_checkpoint", "inclusion:        after the latest checkpoint (size 3): not yet covered by a signature\n"},
		{unsigned, "1", "no_checkpoint", "inclusion:        no checkpoint has been signed yet: not yet covered by a signature\n"},
	} {
		r := mustAudit(t, nil, append([]string{"show", tt.ref}, tt.store.auditFlags()...)...)
		if r.code != 0 || !strings.Contains(r.stdout, tt.line) || !strings.HasPrefix(r.stdout, "seq:              "+tt.ref+"\n") {
			t.Errorf("show %s: exit %d, want a line %q\n%s%s", tt.ref, r.code, tt.line, r.stdout, r.stderr)
		}
		r = mustAudit(t, nil, append(append([]string{"show"}, tt.store.auditFlags()...), "-o", "json", tt.ref)...)
		var shown struct {
			Event     auditlog.Event `json:"event"`
			Inclusion struct {
				Status string `json:"status"`
			} `json:"inclusion"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || r.code != 0 || shown.Event.Seq != mustUint(t, tt.ref) || shown.Inclusion.Status != tt.status {
			t.Errorf("show %s -o json: exit %d %v\n%s", tt.ref, r.code, err, r.stdout)
		}
	}
	if r := mustAudit(t, nil, append([]string{"show", "6"}, signed.auditFlags()...)...); r.code != 1 || r.stderr != "writerd: the audit log has no event 6\n" {
		t.Errorf("show 6: exit %d %s", r.code, r.stderr)
	}
	r := mustVerifyPasses(t, signed.auditFlags()...)
	if !strings.HasPrefix(r.stdout, "events 4 to 5 are after the latest checkpoint (size 3): no signature covers them yet\nverified 5 events against 1 checkpoint; ") {
		t.Errorf("verify, signed to 3:\n%s", r.stdout)
	}
	r = mustVerifyPasses(t, unsigned.auditFlags()...)
	if !strings.HasPrefix(r.stdout, "no checkpoint has been signed yet: no signature covers events 1 to 5\nverified 5 events against 0 checkpoints; ") {
		t.Errorf("verify, unsigned:\n%s", r.stdout)
	}
	if r := mustAudit(t, nil, append([]string{"checkpoint"}, unsigned.storeFlags()...)...); r.code != 1 || !strings.Contains(r.stderr, "no signed checkpoint yet") {
		t.Errorf("checkpoint, unsigned: exit %d %s", r.code, r.stderr)
	}
}

func mustUint(t testing.TB, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
