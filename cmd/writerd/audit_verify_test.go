package main

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/writerd/writerd/pipeline/boltdb/bolttest"
	"github.com/writerd/writerd/pipeline/pgdb/pgtest"
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

// mustVerifyPasses runs verify and checks that it exits 0 with the summary
// line that ends its output, which it returns.
func mustVerifyPasses(t testing.TB, args ...string) ran {
	t.Helper()
	r := mustAudit(t, nil, append([]string{"verify"}, args...)...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || !verifiedRE.MatchString(lines[len(lines)-1]) {
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
		mustVerifyFails(t, "event 22: missing: ", c.auditFlags()...)
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
	fork := mustCopyStore(t, s) // the same log and key, up to here
	mustAuditLog(t, s, "two")

	r = mustVerifyPasses(t, append(s.auditFlags(), "--against", saved)...)
	if !strings.HasPrefix(r.stdout, "the log extends the saved checkpoint of size 12\nverified 24 events against 2 checkpoints; ") {
		t.Errorf("stdout:\n%s", r.stdout)
	}

	other := mustAuditLog(t, kind.make(t), "one")
	otherSaved := filepath.Join(t.TempDir(), "other.txt")
	os.WriteFile(otherSaved, []byte(mustAudit(t, nil, append([]string{"checkpoint"}, other.storeFlags()...)...).stdout), 0o600)
	mustVerifyFails(t, "saved checkpoint: not an extension: ", append(s.auditFlags(), "--against", otherSaved)...)

	mustAuditLog(t, fork, "fork")
	forkSaved := filepath.Join(t.TempDir(), "fork.txt")
	os.WriteFile(forkSaved, []byte(mustAudit(t, nil, append([]string{"checkpoint"}, fork.storeFlags()...)...).stdout), 0o600)
	mustVerifyFails(t, "event 13: not an extension: ", append(s.auditFlags(), "--against", forkSaved)...)
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
	mustVerifyFails(t, "event ", "--export", write("edited.jsonl", strings.Join(edited, "")), "--key", vkey)
	r = mustVerifyFails(t, "event 5: missing: ", "--export", write("removed.jsonl", strings.Join(append(slices.Clone(lines[:5]), lines[6:]...), "")), "--key", vkey)

	other := mustAudit(t, nil, append([]string{"key"}, mustAuditLog(t, kind.make(t), "other").auditFlags()...)...).stdout
	mustVerifyFails(t, "event 12: bad signature: ", "--export", export, "--key", strings.TrimSpace(other))
}
