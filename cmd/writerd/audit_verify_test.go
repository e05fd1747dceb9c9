package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/witness/witnesstest"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/bolttest"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// mustVerifyFails runs verify on a data directory and checks that it
// exits 1 with the problem first named on the first line, and the summary.
func mustVerifyFails(t testing.TB, first string, args ...string) ran {
	t.Helper()
	r := mustAudit(t, nil, append([]string{"verify"}, args...)...)
	if r.code != 1 {
		t.Fatalf("verify exited %d, want 1\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if !strings.HasPrefix(lines[0], first) {
		t.Errorf("the first line is %q, want it to begin %q\n%s", lines[0], first, r.stdout)
	}
	if !strings.HasPrefix(lines[len(lines)-1], "verification failed: ") {
		t.Errorf("the last line is %q, want the summary of a failure", lines[len(lines)-1])
	}
	return r
}

var verifiedRE = regexp.MustCompile(`^verified (\d+ events|events \d+ to \d+) against \d+ checkpoints?; root [A-Za-z0-9+/]{43}=; key writerd/\S+\+[0-9a-f]{8}$`)

// restsRE is verify's last line: what the result rests on.
var restsRE = regexp.MustCompile(`^rests on: (the log's key alone; .+|the checkpoint saved at size \d+(; events \d+ to \d+ on the log's key alone)?|\d+ witness(es)?, who cosigned the checkpoint of size \d+(; events \d+ to \d+ on the log's key alone)?)$`)

// mustVerifyPasses runs verify and checks that it exits 0 with the summary
// line and the line of what it rests on that end its output, which it
// returns.
func mustVerifyPasses(t testing.TB, args ...string) ran {
	t.Helper()
	r := mustAudit(t, nil, append([]string{"verify"}, args...)...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) < 2 || !verifiedRE.MatchString(lines[len(lines)-2]) || !restsRE.MatchString(lines[len(lines)-1]) {
		t.Fatalf("verify: exit %d, want 0 and the summary\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

// tampering changes a stopped daemon's store as someone with write access
// to it could, beneath writerd: the bbolt file's buckets, or the rows of
// the PostgreSQL database.
type tampering struct {
	t testing.TB
	s testStore
}

// editEvent replaces the first old in event seq's JSON with new.
func (tp tampering) editEvent(seq uint64, old, new string) {
	t := tp.t
	t.Helper()
	edit := func(json []byte) []byte {
		i := bytes.Index(json, []byte(old))
		if i < 0 {
			t.Fatalf("event %d holds no %s: %s", seq, old, json)
		}
		return slices.Concat(json[:i], []byte(new), json[i+len(old):])
	}
	if tp.s.URL != "" {
		json := pgtest.Value[[]byte](t, tp.s.URL, "SELECT canonical FROM audit_events WHERE seq = $1", seq)
		pgtest.Exec(t, tp.s.URL, "UPDATE audit_events SET canonical = $2 WHERE seq = $1", seq, edit(json))
		return
	}
	bolttest.Update(t, tp.s.Dir, func(tx bolttest.Tx) error {
		v := tx.Event(t, seq)
		return tx.Events().Put(bolttest.SeqKey(seq), slices.Concat(v[:bolttest.JSONStart(seq)], edit(v[bolttest.JSONStart(seq):])))
	})
}

// deleteEvents deletes the events from seq to last.
func (tp tampering) deleteEvents(seq, last uint64) {
	t := tp.t
	t.Helper()
	if tp.s.URL != "" {
		pgtest.Exec(t, tp.s.URL, "DELETE FROM audit_events WHERE seq BETWEEN $1 AND $2", seq, last)
		return
	}
	bolttest.Update(t, tp.s.Dir, func(tx bolttest.Tx) error {
		for ; seq <= last; seq++ {
			if err := tx.Events().Delete(bolttest.SeqKey(seq)); err != nil {
				return err
			}
		}
		return nil
	})
}

// swapEvents swaps events a and b, all that is stored of each.
func (tp tampering) swapEvents(a, b uint64) {
	t := tp.t
	t.Helper()
	if tp.s.URL != "" {
		pgtest.Exec(t, tp.s.URL, `UPDATE audit_events e SET canonical = o.canonical, leaf_check = o.leaf_check
			FROM audit_events o WHERE (e.seq, o.seq) IN (($1, $2), ($2, $1))`, a, b)
		return
	}
	bolttest.Update(t, tp.s.Dir, func(tx bolttest.Tx) error {
		va, vb := tx.Event(t, a), tx.Event(t, b)
		if bolttest.JSONStart(a) != bolttest.JSONStart(b) {
			t.Fatalf("events %d and %d carry different numbers of tree hashes", a, b)
		}
		if err := tx.Events().Put(bolttest.SeqKey(a), vb); err != nil {
			return err
		}
		return tx.Events().Put(bolttest.SeqKey(b), va)
	})
}

// replaceCheckpoint replaces the signed checkpoint of size with what fn
// makes of it.
func (tp tampering) replaceCheckpoint(size uint64, fn func(signed []byte) []byte) {
	t := tp.t
	t.Helper()
	if tp.s.URL != "" {
		signed := pgtest.Value[[]byte](t, tp.s.URL, "SELECT signed FROM audit_checkpoints WHERE size = $1", size)
		pgtest.Exec(t, tp.s.URL, "UPDATE audit_checkpoints SET signed = $2 WHERE size = $1", size, fn(signed))
		return
	}
	bolttest.Update(t, tp.s.Dir, func(tx bolttest.Tx) error {
		signed := tx.Checkpoints().Get(bolttest.SeqKey(size))
		if signed == nil {
			t.Fatalf("no checkpoint of %d events", size)
		}
		return tx.Checkpoints().Put(bolttest.SeqKey(size), fn(slices.Clone(signed)))
	})
}

// Ensure verify passes an untouched log and, after a run, names the first
// bad sequence number of each change someone with write access to the
// store could make: one byte of an event, an event deleted, two events
// swapped, the events after the latest checkpoint's first ones cut off
// while it remains, a checkpoint's signature replaced.
func TestAuditVerify_Tampering(t *testing.T) { eachStore(t, testAuditVerifyTampering) }

func testAuditVerifyTampering(t *testing.T, kind storeKind) {
	s := mustAuditLog(t, kind.make(t), "one") // events 1-12, a checkpoint of 12 at the stop
	mustAuditLog(t, s, "two")                 // events 13-24, a checkpoint of 24
	const last = 2 * auditScriptEvents        // 24
	tamper := func(t *testing.T) (tampering, testStore) {
		c := mustCopyStore(t, s)
		return tampering{t, c}, c
	}

	t.Run("untouched", func(t *testing.T) {
		r := mustVerifyPasses(t, mustCopyStore(t, s).auditFlags()...)
		if !strings.HasPrefix(r.stdout, "verified 24 events against 2 checkpoints; ") {
			t.Errorf("stdout:\n%s", r.stdout)
		}
	})
	t.Run("one byte edited", func(t *testing.T) {
		tp, c := tamper(t)
		tp.editEvent(7, `"principal":"agent"`, `"principal":"Agent"`)
		mustVerifyFails(t, "event 7: edited: ", c.auditFlags()...)
		r := mustAudit(t, nil, append([]string{"show", "7"}, c.auditFlags()...)...)
		if r.code != 1 || !strings.Contains(r.stdout, "principal:        Agent\n") ||
			!strings.Contains(r.stdout, "inclusion:        FAILED: event 7 is not the one the signed tree of size 24 holds") {
			t.Errorf("show 7: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("one event deleted", func(t *testing.T) {
		tp, c := tamper(t)
		tp.deleteEvents(7, 7)
		mustVerifyFails(t, "event 7: missing: ", c.auditFlags()...)
	})
	t.Run("two events swapped", func(t *testing.T) {
		tp, c := tamper(t)
		tp.swapEvents(5, 7)
		mustVerifyFails(t, "event 5: reordered: ", c.auditFlags()...)
	})
	t.Run("the tail truncated behind the latest checkpoint", func(t *testing.T) {
		tp, c := tamper(t)
		tp.deleteEvents(last-2, last)
		mustVerifyFails(t, "events 22 to 24: missing: ", c.auditFlags()...)
	})
	t.Run("a checkpoint's signature replaced", func(t *testing.T) {
		tp, c := tamper(t)
		tp.replaceCheckpoint(auditScriptEvents, func(signed []byte) []byte {
			text, _, ok := strings.Cut(string(signed), "\n\n")
			if !ok {
				t.Fatalf("not a signed note: %q", signed)
			}
			origin, _, _ := strings.Cut(text, "\n")
			// A key of the log's name that is not the log's key.
			skey, _, err := note.GenerateKey(rand.Reader, origin)
			if err != nil {
				t.Fatal(err)
			}
			signer, err := note.NewSigner(skey)
			if err != nil {
				t.Fatal(err)
			}
			forged, err := note.Sign(&note.Note{Text: text + "\n"}, signer)
			if err != nil {
				t.Fatal(err)
			}
			return forged
		})
		mustVerifyFails(t, "event 12: bad signature: ", c.auditFlags()...)
	})
}

// Ensure verify --against passes with a checkpoint saved before more
// writes, and fails with one of another log (another store and key) and
// with one of a fork of the log under the same key, naming the first event
// where the fork departs.
func TestAuditVerify_Against(t *testing.T) { eachStore(t, testAuditVerifyAgainst) }

func testAuditVerifyAgainst(t *testing.T, kind storeKind) {
	s := mustAuditLog(t, kind.make(t), "one")
	saved := filepath.Join(t.TempDir(), "checkpoint.txt")
	r := mustAudit(t, nil, append([]string{"checkpoint"}, s.storeFlags()...)...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "writerd/") {
		t.Fatalf("checkpoint: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := os.WriteFile(saved, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	// The same log and key, up to here, on a machine of its own: the
	// daemon that signed the log refuses to go on from a copy it did not
	// sign (the self-check), as it would refuse the fork.
	fork := mustForkStore(t, s)
	mustAuditLog(t, s, "two")

	r = mustVerifyPasses(t, append(s.auditFlags(), "--against", saved)...)
	if !strings.HasPrefix(r.stdout, "the log extends the saved checkpoint of size 12\nverified 24 events against 2 checkpoints; ") ||
		!strings.HasSuffix(r.stdout, "\nrests on: the checkpoint saved at size 12; events 13 to 24 on the log's key alone\n") {
		t.Errorf("stdout:\n%s", r.stdout)
	}

	other := mustAuditLog(t, kind.make(t), "one")
	otherSaved := filepath.Join(t.TempDir(), "other.txt")
	os.WriteFile(otherSaved, []byte(mustAudit(t, nil, append([]string{"checkpoint"}, other.storeFlags()...)...).stdout), 0o600)
	mustVerifyFails(t, "saved checkpoint: not an extension: ", append(s.auditFlags(), "--against", otherSaved)...)

	mustAuditLog(t, fork, "fork")
	forkSaved := filepath.Join(t.TempDir(), "fork.txt")
	os.WriteFile(forkSaved, []byte(mustAudit(t, nil, append([]string{"checkpoint"}, fork.storeFlags()...)...).stdout), 0o600)
	// The fork departs at event 13, but only the log's own checkpoint
	// (of 12, which whoever holds the key could have re-signed) says so:
	// the auditor trusts none below the saved one, so the range is 1..24.
	mustVerifyFails(t, "events 1 to 24: not an extension: ", append(s.auditFlags(), "--against", forkSaved)...)
	// With the first checkpoint saved as well, it is bounded by it.
	mustVerifyFails(t, "events 13 to 24: not an extension: ", append(s.auditFlags(), "--against", saved, "--against", forkSaved)...)
	// And the fork, against the log's own first checkpoint, is still its extension.
	mustVerifyPasses(t, append(fork.auditFlags(), "--against", saved)...)
}

// Ensure an export verifies with no database and no daemon, with its own
// key and with the auditor's, from the first event and from a later one;
// and that the same file with one line edited or removed, or checked with
// another log's key, does not.
func TestAuditExport_VerifiesOffline(t *testing.T) { eachStore(t, testAuditExportVerifiesOffline) }

func testAuditExportVerifiesOffline(t *testing.T, kind storeKind) {
	s := mustCopyStore(t, mustAuditLog(t, kind.make(t), "one")) // the daemon's end checks the original
	files := t.TempDir()
	vkey := filepath.Join(files, "writerd.vkey")
	r := mustAudit(t, nil, append([]string{"key"}, s.auditFlags()...)...)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("key: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	os.WriteFile(vkey, []byte(r.stdout), 0o600)
	export := filepath.Join(files, "audit.jsonl")
	if r := mustAudit(t, nil, append([]string{"export", "-o", export}, s.auditFlags()...)...); r.code != 0 || r.stdout != "" {
		t.Fatalf("export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	from7 := mustAudit(t, nil, append([]string{"export", "--from", "7"}, s.auditFlags()...)...)
	stdout := mustAudit(t, nil, append([]string{"export"}, s.auditFlags()...)...)
	os.RemoveAll(s.Dir) // offline from here on (no key file, and a database is named nowhere below)
	b, err := os.ReadFile(export)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != stdout.stdout {
		t.Errorf("the export to a file and to stdout differ")
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) != 1+auditScriptEvents+1 || lines[len(lines)-1] != "" || !strings.HasPrefix(lines[0], `{"writerd_audit_export":1,"verifier_key":"writerd/`) {
		t.Fatalf("the export has %d lines:\n%s", len(lines), b)
	}
	if fi, err := os.Stat(export); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the export's mode: %v %v", fi.Mode(), err)
	}

	r = mustVerifyPasses(t, "--export", export)
	if !strings.HasPrefix(r.stdout, "verified 12 events against 1 checkpoint; ") || !strings.Contains(r.stderr, "the verifier key is the one the export carries") {
		t.Errorf("with the export's key:\n%s%s", r.stdout, r.stderr)
	}
	if r := mustVerifyPasses(t, "--export", export, "--key", vkey); r.stderr != "" {
		t.Errorf("with --key, stderr: %s", r.stderr)
	}
	write := func(name, content string) string {
		p := filepath.Join(files, name)
		os.WriteFile(p, []byte(content), 0o600)
		return p
	}
	r = mustVerifyPasses(t, "--export", write("from7.jsonl", from7.stdout), "--key", vkey)
	if !strings.HasPrefix(r.stdout, "verified events 7 to 12 against 1 checkpoint; ") {
		t.Errorf("from 7:\n%s", r.stdout)
	}

	edited := slices.Clone(lines)
	edited[5] = strings.Replace(edited[5], `"principal":"agent"`, `"principal":"agenT"`, 1)
	if edited[5] == lines[5] {
		t.Fatal("nothing edited")
	}
	// An export carries no leaf checks, and its one checkpoint is the
	// log's own: the root bounds the change to the whole export.
	mustVerifyFails(t, "events 1 to 12: edited: ", "--export", write("edited.jsonl", strings.Join(edited, "")), "--key", vkey)
	r = mustVerifyFails(t, "event 5: missing: ", "--export", write("removed.jsonl", strings.Join(append(slices.Clone(lines[:5]), lines[6:]...), "")), "--key", vkey)

	other := mustAudit(t, nil, append([]string{"key"}, mustAuditLog(t, kind.make(t), "other").auditFlags()...)...).stdout
	mustVerifyFails(t, "event 12: bad signature: ", "--export", export, "--key", strings.TrimSpace(other))
}

// Ensure --against never names an event later than the first one changed
// and takes its bounds only from checkpoints the auditor saved: one event
// edited at 7 in a log of 80 whose stored leaf checks hold is named; the
// log rewritten and re-signed with its key, checkpoints and all, is
// bounded by the saved checkpoints at 44 and 71 to 1..44.
func TestAuditVerify_AgainstBounds(t *testing.T) { eachStore(t, testAuditVerifyAgainstBounds) }

func testAuditVerifyAgainstBounds(t *testing.T, kind storeKind) {
	now := time.Now()
	events := func(edited int) []seeded {
		var out []seeded
		for i := 1; i <= 80; i++ {
			principal := "agent"
			if i == edited {
				principal = "admin"
			}
			out = append(out, seeded{age: time.Duration(81-i) * time.Minute, tool: "create_record", principal: principal, outcome: "ok",
				k: fmt.Sprintf("k-%02d", i), targets: []auditlog.Target{widget(fmt.Sprintf("w%02d", i), 1)}})
		}
		return out
	}
	keyFile := filepath.Join(t.TempDir(), "audit-signing.key")
	honest := mustSeedLogWith(t, kind, keyFile, now, events(0), 44, 71, 80)
	vkey := strings.TrimSpace(mustAudit(t, nil, append([]string{"key"}, honest.auditFlags()...)...).stdout)
	if vkey == "" {
		key, err := auditlog.LoadKey(keyFile, "", false)
		if err != nil {
			t.Fatal(err)
		}
		vkey = key.VerifierKey
	}
	saved := t.TempDir()
	save := func(size uint64) string {
		var signed []byte
		s, err := daemon.OpenReadOnly(honest.config())
		if err != nil {
			t.Fatal(err)
		}
		err = s.View(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
			cps, err := tx.Audit().Checkpoints()
			for _, c := range cps {
				if cp, _ := auditlog.ParseSigned(c); cp.Size == size {
					signed = c
				}
			}
			return err
		})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(saved, fmt.Sprintf("checkpoint-%d.txt", size))
		if err := os.WriteFile(p, signed, 0o600); err != nil || signed == nil {
			t.Fatalf("no checkpoint of %d saved: %v", size, err)
		}
		return p
	}
	at44, at71 := save(44), save(71)

	edited := mustCopyStore(t, honest)
	tampering{t, edited}.editEvent(7, `"principal":"agent"`, `"principal":"Agent"`)
	mustVerifyFails(t, "event 7: edited: ", append(edited.storeFlags(), "--key", vkey, "--against", at44, "--against", at71)...)

	rewritten := mustSeedLogWith(t, kind, keyFile, now, events(7), 10, 20, 30, 40, 50, 60, 70, 80)
	r := mustVerifyFails(t, "events 1 to 44: not an extension: ", append(rewritten.storeFlags(), "--key", vkey, "--against", at44, "--against", at71)...)
	if !strings.Contains(r.stdout, "an event from 1 to 44 was changed") || strings.Count(r.stdout, "\n") != 2 {
		t.Errorf("the rewrite's report:\n%s", r.stdout)
	}
	// With the key alone, the rewrite verifies: what the last line warns.
	r = mustVerifyPasses(t, append(rewritten.storeFlags(), "--key", vkey)...)
	if !strings.HasSuffix(r.stdout, "rests on: the log's key alone; a holder of the key could have rewritten the log: pin a checkpoint with --against or require witnesses\n") {
		t.Errorf("the rewrite with the key alone:\n%s", r.stdout)
	}
}

// Ensure audit checkpoint --now has the daemon sign the log as it is at
// once, and that an export says how many newer events than its checkpoint
// the log holds, which it left out.
func TestAuditCheckpoint_NowAndExportNewer(t *testing.T) {
	s := boltStores.make(t)
	tok := mustAuditTokens(t)
	// No checkpoint comes by itself while the test runs.
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file, args: []string{"--checkpoint-every", "1000000", "--checkpoint-interval", "1h"}})
	env := []string{"WRITERD_TOKEN=" + tok.auditor}
	mustWriteScript(t, d, tok.agent, "now")
	if r := mustAudit(t, env, "checkpoint", "--server", d.url); r.code != 1 || !strings.Contains(r.stderr, "no signed checkpoint yet") {
		t.Fatalf("checkpoint before any: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	r := mustAudit(t, env, "checkpoint", "--server", d.url, "--now")
	if r.code != 0 || strings.Split(r.stdout, "\n")[1] != "12" {
		t.Fatalf("checkpoint --now: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	mustWrite(t, d, tok.agent, "create_project", "now-newer-1", `{"name":"newer-1"}`, "")
	mustWrite(t, d, tok.agent, "create_project", "now-newer-2", `{"name":"newer-2"}`, "")
	r = mustAudit(t, env, "export", "--server", d.url)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1+auditScriptEvents ||
		r.stderr != "writerd audit export: the log holds 2 newer events (13 to 14) than the checkpoint of size 12, left out: no signature covers them yet; writerd audit checkpoint --server URL --now signs one now\n" {
		t.Errorf("export with newer events: exit %d, %d lines\nstderr: %s", r.code, strings.Count(r.stdout, "\n"), r.stderr)
	}
	if r := mustAudit(t, env, "checkpoint", "--server", d.url, "--now"); r.code != 0 || strings.Split(r.stdout, "\n")[1] != "14" {
		t.Fatalf("checkpoint --now again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := mustAudit(t, env, "export", "--server", d.url); r.code != 0 || r.stderr != "" || strings.Count(r.stdout, "\n") != 15 {
		t.Errorf("export of a log all signed: exit %d, %d lines\nstderr: %s", r.code, strings.Count(r.stdout, "\n"), r.stderr)
	}
	// Without the audit scope, nothing is signed.
	if r := mustAudit(t, []string{"WRITERD_TOKEN=" + tok.agent}, "checkpoint", "--server", d.url, "--now"); r.code != 1 || !strings.Contains(r.stderr, "audit scope") {
		t.Errorf("checkpoint --now with an agent's token: exit %d %s", r.code, r.stderr)
	}
	d.Stop()
	if r := mustAudit(t, nil, "checkpoint", "--now", "--data", s.Dir); r.code != 2 || !strings.Contains(r.stderr, "--now asks a running daemon to sign: give --server") {
		t.Errorf("checkpoint --now --data: exit %d %s", r.code, r.stderr)
	}
}

// Ensure verify's witness flags are checked before anything is read: a
// quorum above the witnesses given, or of zero, a key given twice, and a
// value that is no witness key, each with one sentence that names the
// flag.
func TestAuditVerify_WitnessFlags(t *testing.T) {
	s := mustAuditLog(t, boltStores.make(t), "flags")
	a, b := mustWitnessKey(t, "witness.example/a"), mustWitnessKey(t, "witness.example/b")
	logKey := strings.TrimSpace(mustAudit(t, nil, append([]string{"key"}, s.auditFlags()...)...).stdout)
	if _, err := auditlog.ParseVerifierKey(logKey); err != nil {
		t.Fatalf("the log's key %q: %v", logKey, err)
	}
	tests := []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--witness", a, "--witness", b, "--quorum", "3"}, 2, "--quorum takes a number from 1 to the number of --witness keys (2)"},
		{[]string{"--quorum", "1"}, 2, "--quorum counts the witnesses given with --witness, and none is"},
		{[]string{"--witness", a, "--quorum", "0"}, 2, "--quorum takes a number from 1: to trust no witness, give none"},
		{[]string{"--witness", a, "--witness", a}, 1, "--witness witness.example/a is given twice"},
		{[]string{"--witness", "not-a-key"}, 1, "--witness is neither a witness's verifier key nor a file that can be read"},
		// The log's own key is no witness's: its signature is on every checkpoint.
		{[]string{"--witness", logKey}, 1, "--witness is neither a witness's verifier key nor a file that can be read"},
		// Both witnesses are trusted, but neither cosigned this log.
		{[]string{"--witness", a, "--witness", b}, 1, ""},
	}
	for _, tt := range tests {
		r := mustAudit(t, nil, append(append([]string{"verify"}, s.auditFlags()...), tt.args...)...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.says) || tt.code == 1 && tt.says != "" && strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("verify %s: exit %d, want %d saying %q\nstdout: %s\nstderr: %s", strings.Join(tt.args, " "), r.code, tt.code, tt.says, r.stdout, r.stderr)
		}
		if tt.says == "" && !strings.HasPrefix(r.stdout, "witnesses: unwitnessed: No checkpoint of the log carries cosignatures of 2 of the 2 witnesses given.\n") {
			t.Errorf("verify with witnesses who cosigned nothing:\n%s", r.stdout)
		}
	}
}

// mustWitnessKey makes a witness's verifier key (c2sp.org/tlog-cosignature)
// of a key no witness holds.
func mustWitnessKey(t testing.TB, name string) string {
	t.Helper()
	return witnesstest.NewSigner(t, name).Verifier().String()
}
