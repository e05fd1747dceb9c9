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

// Ensure verify passes an untouched log and, after a run, names the first
// bad sequence number of each change someone with write access to the
// database file could make: one byte of an event, an event deleted, two
// events swapped, the events after the latest checkpoint's first ones cut
// off while it remains, a checkpoint's signature replaced.
func TestAuditVerify_Tampering(t *testing.T) {
	dir := mustAuditLog(t, "", "one")  // events 1-12, a checkpoint of 12 at the stop
	mustAuditLog(t, dir, "two")        // events 13-24, a checkpoint of 24
	const last = 2 * auditScriptEvents // 24

	t.Run("untouched", func(t *testing.T) {
		r := mustVerifyPasses(t, "--data", mustCopyDir(t, dir))
		if !strings.HasPrefix(r.stdout, "verified 24 events against 2 checkpoints; ") {
			t.Errorf("stdout:\n%s", r.stdout)
		}
	})
	t.Run("one byte edited", func(t *testing.T) {
		copied := mustCopyDir(t, dir)
		bolttest.Update(t, copied, func(tx bolttest.Tx) error {
			v := tx.Event(t, 7)
			i := bytes.Index(v[bolttest.JSONStart(7):], []byte(`"principal":"agent"`))
			if i < 0 {
				t.Fatalf("event 7 has no principal agent: %s", v[bolttest.JSONStart(7):])
			}
			v[bolttest.JSONStart(7)+i+len(`"principal":"`)] = 'A' // "Agent"
			return tx.Events().Put(bolttest.SeqKey(7), v)
		})
		mustVerifyFails(t, "event 7: edited: ", "--data", copied)
		r := mustAudit(t, nil, "show", "7", "--data", copied)
		if r.code != 1 || !strings.Contains(r.stdout, "principal:        Agent\n") ||
			!strings.Contains(r.stdout, "inclusion:        FAILED: event 7 is not the one the signed tree of size 24 holds") {
			t.Errorf("show 7: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("one event deleted", func(t *testing.T) {
		copied := mustCopyDir(t, dir)
		bolttest.Update(t, copied, func(tx bolttest.Tx) error { return tx.Events().Delete(bolttest.SeqKey(7)) })
		mustVerifyFails(t, "event 7: missing: ", "--data", copied)
	})
	t.Run("two events swapped", func(t *testing.T) {
		copied := mustCopyDir(t, dir)
		bolttest.Update(t, copied, func(tx bolttest.Tx) error {
			five, seven := tx.Event(t, 5), tx.Event(t, 7)
			if bolttest.JSONStart(5) != bolttest.JSONStart(7) {
				t.Fatal("events 5 and 7 carry different numbers of tree hashes")
			}
			if err := tx.Events().Put(bolttest.SeqKey(5), seven); err != nil {
				return err
			}
			return tx.Events().Put(bolttest.SeqKey(7), five)
		})
		mustVerifyFails(t, "event 5: reordered: ", "--data", copied)
	})
	t.Run("the tail truncated behind the latest checkpoint", func(t *testing.T) {
		copied := mustCopyDir(t, dir)
		bolttest.Update(t, copied, func(tx bolttest.Tx) error {
			if tx.Checkpoints().Get(bolttest.SeqKey(last)) == nil {
				t.Fatalf("no checkpoint of %d events", last)
			}
			for seq := uint64(last - 2); seq <= last; seq++ {
				if err := tx.Events().Delete(bolttest.SeqKey(seq)); err != nil {
					return err
				}
			}
			return nil
		})
		mustVerifyFails(t, "event 22: missing: ", "--data", copied)
	})
	t.Run("a checkpoint's signature replaced", func(t *testing.T) {
		copied := mustCopyDir(t, dir)
		bolttest.Update(t, copied, func(tx bolttest.Tx) error {
			signed := tx.Checkpoints().Get(bolttest.SeqKey(auditScriptEvents))
			text, _, ok := strings.Cut(string(signed), "\n\n")
			if !ok {
				t.Fatalf("not a signed note: %q", signed)
			}
			origin, _, _ := strings.Cut(text, "\n")
			// A key of the log's name that is not the log's key.
			skey, _, err := note.GenerateKey(rand.Reader, origin)
			if err != nil {
				return err
			}
			signer, err := note.NewSigner(skey)
			if err != nil {
				return err
			}
			forged, err := note.Sign(&note.Note{Text: text + "\n"}, signer)
			if err != nil {
				return err
			}
			return tx.Checkpoints().Put(bolttest.SeqKey(auditScriptEvents), forged)
		})
		mustVerifyFails(t, "event 12: bad signature: ", "--data", copied)
	})
}

// Ensure verify --against passes with a checkpoint saved before more
// writes, and fails with one of another log (another data directory and
// key) and with one of a fork of the log under the same key, naming the
// first event where the fork departs.
func TestAuditVerify_Against(t *testing.T) {
	dir := mustAuditLog(t, "", "one")
	saved := filepath.Join(t.TempDir(), "checkpoint.txt")
	r := mustAudit(t, nil, "checkpoint", "--data", dir)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "writerd/") {
		t.Fatalf("checkpoint: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if err := os.WriteFile(saved, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	fork := mustCopyDir(t, dir) // the same log and key, up to here
	mustAuditLog(t, dir, "two")

	r = mustVerifyPasses(t, "--data", dir, "--against", saved)
	if !strings.HasPrefix(r.stdout, "the log extends the saved checkpoint of size 12\nverified 24 events against 2 checkpoints; ") {
		t.Errorf("stdout:\n%s", r.stdout)
	}

	other := mustAuditLog(t, "", "one")
	otherSaved := filepath.Join(t.TempDir(), "other.txt")
	os.WriteFile(otherSaved, []byte(mustAudit(t, nil, "checkpoint", "--data", other).stdout), 0o600)
	mustVerifyFails(t, "saved checkpoint: not an extension: ", "--data", dir, "--against", otherSaved)

	mustAuditLog(t, fork, "fork")
	forkSaved := filepath.Join(t.TempDir(), "fork.txt")
	os.WriteFile(forkSaved, []byte(mustAudit(t, nil, "checkpoint", "--data", fork).stdout), 0o600)
	mustVerifyFails(t, "event 13: not an extension: ", "--data", dir, "--against", forkSaved)
	// And the fork, against the log's own first checkpoint, is still its extension.
	mustVerifyPasses(t, "--data", fork, "--against", saved)
}

// Ensure an export verifies with no database and no daemon, with its own
// key and with the auditor's, from the first event and from a later one;
// and that the same file with one line edited or removed, or checked with
// another log's key, does not.
func TestAuditExport_VerifiesOffline(t *testing.T) {
	dir := mustCopyDir(t, mustAuditLog(t, "", "one"))
	files := t.TempDir()
	vkey := filepath.Join(files, "writerd.vkey")
	r := mustAudit(t, nil, "key", "--data", dir)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("key: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	os.WriteFile(vkey, []byte(r.stdout), 0o600)
	export := filepath.Join(files, "audit.jsonl")
	if r := mustAudit(t, nil, "export", "--data", dir, "-o", export); r.code != 0 || r.stdout != "" {
		t.Fatalf("export: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	from7 := mustAudit(t, nil, "export", "--data", dir, "--from", "7")
	stdout := mustAudit(t, nil, "export", "--data", dir)
	os.RemoveAll(dir) // offline from here on
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

	other := mustAudit(t, nil, "key", "--data", mustAuditLog(t, "", "other")).stdout
	mustVerifyFails(t, "event 12: bad signature: ", "--export", export, "--key", strings.TrimSpace(other))
}
