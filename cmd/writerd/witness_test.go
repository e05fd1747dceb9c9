package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/auditlog/witness/witnesstest"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// The daemon and real witnesses (litewitness, filippo.io/torchwood
// v0.9.0; witnesstest finds it, or the tests skip with one line): every
// checkpoint cosigned, a witness down and back, a forked log refused.
// Checkpoints are signed every 3 events (and no interval's: the sizes are
// exact), and each burst of writes waits for its checkpoint's
// cosignatures, so that a round never sees two new checkpoints at once
// (the cosigner sends only the latest).

const witnessEvery = 3

// witnessLog is a log the witnesses follow: its daemon's store, tokens
// and key.
type witnessLog struct {
	t       *testing.T
	store   testStore
	tokens  auditTokens
	keyFile string // --audit-key
	origin  string
	vkey    string
	v       note.Verifier
	written int
	prefix  string
}

// newWitnessLog makes a log's key and learns its origin and verifier key
// from a first daemon started without witnesses, as an operator does
// before adding the log to a witness (witnessctl add-log, add-key); it
// adds it to each witness.
func newWitnessLog(t *testing.T, store testStore, keyFile, prefix string, ws ...*witnesstest.Litewitness) *witnessLog {
	t.Helper()
	l := &witnessLog{t: t, store: store, tokens: mustAuditTokens(t), keyFile: keyFile, prefix: prefix}
	d := l.start()
	r := d.Do("GET", "/v1/audit/key", "", "Authorization", "Bearer "+l.tokens.auditor)
	if r.status != 200 {
		t.Fatalf("GET /v1/audit/key: %d %s", r.status, r.body)
	}
	l.vkey = strings.TrimSpace(r.body)
	var err error
	if l.v, err = auditlog.ParseVerifierKey(l.vkey); err != nil {
		t.Fatal(err)
	}
	l.origin = l.v.Name()
	d.Stop()
	for _, w := range ws {
		if _, known := w.Size(l.origin); !known {
			w.AddLog(l.origin, l.vkey)
		}
	}
	return l
}

// start starts the log's daemon with the witnesses given as flags.
func (l *witnessLog) start(args ...string) *httpDaemon {
	l.t.Helper()
	args = append([]string{"--checkpoint-every", strconv.Itoa(witnessEvery), "--checkpoint-interval", "1h", "--audit-key", l.keyFile}, args...)
	return MustStartHTTP(l.t, httpConfig{store: l.store, tokens: l.tokens.file, args: args})
}

// witnessFlags are the flags that send checkpoints to the witnesses.
func witnessFlags(quorum int, ws ...*witnesstest.Litewitness) []string {
	var args []string
	for _, w := range ws {
		args = append(args, "--witness", w.Witness())
	}
	return append(args, "--witness-quorum", strconv.Itoa(quorum))
}

// burst writes witnessEvery events, so that one checkpoint is signed at
// their end, and returns its size.
func (l *witnessLog) burst(d *httpDaemon) uint64 {
	l.t.Helper()
	for range witnessEvery {
		l.written++
		mustWrite(l.t, d, l.tokens.agent, "create_project", fmt.Sprintf("%s-%05d", l.prefix, l.written), fmt.Sprintf(`{"name":"%s-%d"}`, l.prefix, l.written), "")
	}
	return uint64(l.written)
}

// latest returns the daemon's latest checkpoint, as /v1/audit/checkpoint
// serves it.
func (l *witnessLog) latest(d *httpDaemon) []byte {
	l.t.Helper()
	r := d.Do("GET", "/v1/audit/checkpoint", "", "Authorization", "Bearer "+l.tokens.auditor)
	if r.status != 200 {
		return nil
	}
	return []byte(r.body)
}

// checkpoints returns every checkpoint /v1/audit/checkpoints serves.
func (l *witnessLog) checkpoints(d *httpDaemon) [][]byte {
	l.t.Helper()
	r := d.Do("GET", "/v1/audit/checkpoints", "", "Authorization", "Bearer "+l.tokens.auditor)
	var list struct{ Checkpoints []string }
	if r.status != 200 || json.Unmarshal([]byte(r.body), &list) != nil {
		l.t.Fatalf("GET /v1/audit/checkpoints: %d %s", r.status, r.body)
	}
	var out [][]byte
	for _, c := range list.Checkpoints {
		out = append(out, []byte(c))
	}
	return out
}

// waitCosigned waits until the daemon serves its checkpoint of size with
// a cosignature of each of the witnesses, and returns it.
func (l *witnessLog) waitCosigned(d *httpDaemon, size uint64, within time.Duration, ws ...*witnesstest.Litewitness) []byte {
	l.t.Helper()
	var cp []byte
	l.t.Cleanup(func() {
		if l.t.Failed() {
			l.t.Logf("daemon log:\n%s", d.stderr)
		}
	})
	waitFor(l.t, within, fmt.Sprintf("the checkpoint of size %d cosigned by %d witnesses", size, len(ws)), func() bool {
		cp = l.latest(d)
		c, err := auditlog.OpenCheckpoint(cp, l.v)
		return err == nil && c.Size == size && len(cosigners(l.t, cp, ws...)) == len(ws)
	})
	return cp
}

// cosigners returns the names of the witnesses whose cosignature on the
// note verifies with their key (torchwood's cosignature/v1 verifier), and
// fails the test if the log's signature is not its first line.
func cosigners(t testing.TB, signed []byte, ws ...*witnesstest.Litewitness) []string {
	t.Helper()
	var out []string
	for _, w := range ws {
		v, err := torchwood.NewCosignatureVerifier(w.VerifierKey)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := note.Open(signed, note.VerifierList(v)); err == nil {
			out = append(out, w.Name)
		}
	}
	return out
}

// mustCosignedBy checks a served note: the log's signature first and
// verifying, then exactly one line per witness, each verifying.
func (l *witnessLog) mustCosignedBy(signed []byte, ws ...*witnesstest.Litewitness) {
	l.t.Helper()
	if _, err := auditlog.OpenCheckpoint(signed, l.v); err != nil {
		l.t.Fatalf("the checkpoint does not verify with the log's key: %v\n%s", err, signed)
	}
	_, sigs, _ := bytes.Cut(signed, []byte("\n\n"))
	lines := strings.Split(strings.TrimSuffix(string(sigs), "\n"), "\n")
	if len(lines) != 1+len(ws) || !strings.HasPrefix(lines[0], "— "+l.origin+" ") {
		l.t.Fatalf("signature lines %q: want the log's first, then one per witness", lines)
	}
	if got := cosigners(l.t, signed, ws...); len(got) != len(ws) {
		l.t.Fatalf("cosigned by %v of %d witnesses:\n%s", got, len(ws), signed)
	}
}

func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, within)
		}
	}
}

// metric returns a sample's value from the daemon's /metrics, 0 if it
// has none; labels are name, value pairs.
func metric(t testing.TB, d *httpDaemon, name string, labels ...string) float64 {
	t.Helper()
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	sort.Strings(pairs) // the exposition orders labels by name
	series := name
	if len(pairs) > 0 {
		series += "{" + strings.Join(pairs, ",") + "}"
	}
	sc := bufio.NewScanner(strings.NewReader(d.Do("GET", "/metrics", "").body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return f
		}
	}
	return 0
}

// logLines counts the daemon's log lines of a level whose message starts
// with prefix.
func logLines(d *httpDaemon, level, prefix string) int {
	n := 0
	for _, line := range strings.Split(d.stderr.String(), "\n") {
		var m struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &m) == nil && m.Level == level && strings.HasPrefix(m.Msg, prefix) {
			n++
		}
	}
	return n
}

// forkLogged reports whether the daemon logged a FORK error naming the
// witness.
func forkLogged(d *httpDaemon, name string) bool {
	for _, line := range strings.Split(d.stderr.String(), "\n") {
		var m struct{ Level, Msg, Witness string }
		if json.Unmarshal([]byte(line), &m) == nil && m.Level == "ERROR" && strings.HasPrefix(m.Msg, "FORK:") && m.Witness == name {
			return true
		}
	}
	return false
}

// witnessEnv gives the test's daemons a key directory of their own.
func witnessEnv(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
}

// Ensure that with two real witnesses and quorum 2, every checkpoint the
// daemon signs is served, by /v1/audit/checkpoint and in
// /v1/audit/checkpoints, with both cosignatures after the log's
// signature, each verifying with its witness's key; that the witnesses
// follow the log to its size; and that the metrics say the quorum holds.
// On PostgreSQL, the daemon sends as the replica its store elects.
func TestWitness_EveryCheckpointCosigned(t *testing.T) {
	eachStore(t, testWitness_EveryCheckpointCosigned)
}

func testWitness_EveryCheckpointCosigned(t *testing.T, kind storeKind) {
	w1, w2 := witnesstest.Start(t, "witness.example/w1"), witnesstest.Start(t, "witness.example/w2")
	witnessEnv(t)
	l := newWitnessLog(t, kind.make(t), filepath.Join(t.TempDir(), "audit.key"), "honest", w1, w2)
	d := l.start(witnessFlags(2, w1, w2)...)
	const bursts = 4
	for range bursts {
		size := l.burst(d)
		l.mustCosignedBy(l.waitCosigned(d, size, 10*time.Second, w1, w2), w1, w2)
	}
	cps := l.checkpoints(d)
	if len(cps) != bursts {
		t.Fatalf("%d checkpoints, want %d (one a burst)", len(cps), bursts)
	}
	for _, cp := range cps {
		l.mustCosignedBy(cp, w1, w2)
	}
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		if size, _ := w.Size(l.origin); size != bursts*witnessEvery {
			t.Errorf("witness %s knows size %d, want %d", w.Name, size, bursts*witnessEvery)
		}
		if got := metric(t, d, "writerd_audit_witness_requests_total", "witness", w.Name, "result", "cosigned"); got != bursts {
			t.Errorf("witness %s: %v cosigned requests, want %d", w.Name, got, bursts)
		}
	}
	if got := metric(t, d, "writerd_audit_witness_cosignatures"); got != 2 {
		t.Errorf("writerd_audit_witness_cosignatures = %v, want 2", got)
	}
	if got := metric(t, d, "writerd_audit_checkpoints_without_quorum_total"); got != 0 {
		t.Errorf("writerd_audit_checkpoints_without_quorum_total = %v, want 0", got)
	}
	if n := logLines(d, "WARN", ""); n != 0 {
		t.Errorf("%d warnings with every witness up:\n%s", n, d.stderr)
	}
}

// Ensure a witness down for a while holds up no write and no checkpoint:
// the other still cosigns, the metrics count each checkpoint without its
// quorum, the log warns once; back on the same database, it cosigns
// again from the size it knows (no 409: the daemon believed it right).
// Then a witness that knows a newer tree than the daemon believes (fed
// while the daemon was down, as another replica or an operator could)
// answers 409, and the restarted daemon sends again from its size.
func TestWitness_DownAndBack(t *testing.T) {
	w1, w2 := witnesstest.Start(t, "witness.example/w1"), witnesstest.Start(t, "witness.example/w2")
	witnessEnv(t)
	l := newWitnessLog(t, testStore{Dir: t.TempDir()}, filepath.Join(t.TempDir(), "audit.key"), "log", w1, w2)
	flags := witnessFlags(2, w1, w2)
	d := l.start(flags...)
	l.waitCosigned(d, l.burst(d), 10*time.Second, w1, w2)

	w2.Stop()
	start := time.Now()
	const down = 3
	for range down {
		size := l.burst(d) // the writes succeed (mustWrite)
		cp := l.waitCosigned(d, size, 10*time.Second, w1)
		if got := cosigners(t, cp, w2); len(got) != 0 {
			t.Fatalf("a checkpoint signed while w2 was down carries its cosignature")
		}
	}
	if got := metric(t, d, "writerd_audit_witness_quorum_missing"); got != 1 {
		t.Errorf("writerd_audit_witness_quorum_missing = %v while w2 is down, want 1", got)
	}
	if got := metric(t, d, "writerd_audit_checkpoints_without_quorum_total"); got != down {
		t.Errorf("writerd_audit_checkpoints_without_quorum_total = %v, want %d", got, down)
	}
	if got := metric(t, d, "writerd_audit_witness_requests_total", "witness", w2.Name, "result", "unreachable"); got < 1 {
		t.Errorf("no unreachable request to w2 counted")
	}
	if n := logLines(d, "WARN", "an audit checkpoint lacks its witness quorum"); n != 1 {
		t.Errorf("%d quorum warnings over %d checkpoints, want 1:\n%s", n, down, d.stderr)
	}
	t.Logf("w2 was down %v over %d checkpoints", time.Since(start).Round(time.Millisecond), down)

	w2.Start()
	size := l.burst(d)
	// w2 is retried after its backoff (5 s at first).
	l.mustCosignedBy(l.waitCosigned(d, size, 20*time.Second, w1, w2), w1, w2)
	if got, _ := w2.Size(l.origin); got != size {
		t.Errorf("w2 knows size %d, want %d", got, size)
	}
	if got := metric(t, d, "writerd_audit_witness_requests_total", "witness", w2.Name, "result", "conflict"); got != 0 {
		t.Errorf("%v conflicts with w2: the daemon should resume from the size it knows", got)
	}
	if got := metric(t, d, "writerd_audit_witness_quorum_missing"); got != 0 {
		t.Errorf("writerd_audit_witness_quorum_missing = %v once w2 is back, want 0", got)
	}
	if logLines(d, "INFO", "the audit log's latest checkpoint has its witness quorum again") != 1 {
		t.Errorf("the quorum's return is not logged once:\n%s", d.stderr)
	}

	// w2 down again, the daemon stopped: its last checkpoint is cosigned
	// by w1 alone. w2 comes back and another sender feeds it that
	// checkpoint.
	w2.Stop()
	size = l.burst(d)
	l.waitCosigned(d, size, 10*time.Second, w1)
	if code := d.Stop(); code != 0 {
		t.Fatalf("the daemon exited %d:\n%s", code, d.stderr)
	}
	w2.Start()
	old, _ := w2.Size(l.origin)
	var latest []byte
	var proof tlog.TreeProof
	st := MustOpenStore(t, l.store)
	st.view(func(tx pipeline.Tx[handlers.Store]) error {
		_, signed, err := tx.Audit().LatestCheckpoint()
		if err != nil {
			return err
		}
		latest = signed
		proof, err = auditlog.ConsistencyProof(tx.Audit(), old, size)
		return err
	})
	st.s.Close() // let the daemon have it
	fed, err := witness.Parse(w2.Witness())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fed.AddCheckpoint(context.Background(), witness.NewClient(), old, proof, latest); err != nil {
		t.Fatalf("feed w2 the checkpoint of size %d from %d: %v", size, old, err)
	}
	d = l.start(flags...)
	l.mustCosignedBy(l.waitCosigned(d, size, 10*time.Second, w1, w2), w1, w2)
	if got := metric(t, d, "writerd_audit_witness_requests_total", "witness", w2.Name, "result", "conflict"); got != 1 {
		t.Errorf("%v conflicts with w2, want 1: believed at %d, it knows %d", got, old, size)
	}
	if got := metric(t, d, "writerd_audit_witness_tree_size", "witness", w2.Name); got != float64(size) {
		t.Errorf("writerd_audit_witness_tree_size{w2} = %v, want %d", got, size)
	}
	if got := metric(t, d, "writerd_audit_witness_requests_total", "witness", w1.Name, "result", "cosigned"); got != 0 {
		t.Errorf("w1 was sent the checkpoint it had cosigned already (%v times)", got)
	}
}

// Ensure a forked log (the same key and origin, copied to another data
// directory, over other events) is refused by both real witnesses, 409
// then 422; the daemon logs a FORK error naming each witness, goes on
// writing and signing, and its checkpoints carry no cosignature, while
// the honest log's carry both; the witnesses stay at the honest size.
func TestWitness_ForkRefused(t *testing.T) {
	w1, w2 := witnesstest.Start(t, "witness.example/w1"), witnesstest.Start(t, "witness.example/w2")
	witnessEnv(t)
	honestKey := filepath.Join(t.TempDir(), "audit.key")
	honest := newWitnessLog(t, testStore{Dir: t.TempDir()}, honestKey, "honest", w1, w2)
	h := honest.start(witnessFlags(2, w1, w2)...)
	for range 2 {
		honest.waitCosigned(h, honest.burst(h), 10*time.Second, w1, w2)
	}
	honestCPs := honest.checkpoints(h)
	h.Stop()

	// The same key, copied (its state file stays behind), over a new
	// database with other events.
	b, err := os.ReadFile(honestKey)
	if err != nil {
		t.Fatal(err)
	}
	forkKey := filepath.Join(t.TempDir(), "audit.key")
	if err := os.WriteFile(forkKey, b, 0o600); err != nil {
		t.Fatal(err)
	}
	fork := newWitnessLog(t, testStore{Dir: t.TempDir()}, forkKey, "fork", w1, w2)
	if fork.origin != honest.origin || fork.vkey != honest.vkey {
		t.Fatalf("the fork signs as %s, not as the honest log %s", fork.vkey, honest.vkey)
	}
	f := fork.start(witnessFlags(2, w1, w2)...)
	for range 3 {
		fork.burst(f) // 9 events: past the 6 the witnesses know
	}
	waitFor(t, 10*time.Second, "both witnesses' 422", func() bool {
		return metric(t, f, "writerd_audit_witness_requests_total", "witness", w1.Name, "result", "fork") >= 1 &&
			metric(t, f, "writerd_audit_witness_requests_total", "witness", w2.Name, "result", "fork") >= 1
	})
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		if got := metric(t, f, "writerd_audit_witness_requests_total", "witness", w.Name, "result", "conflict"); got < 1 {
			t.Errorf("witness %s: no 409 before its 422 (%v)", w.Name, got)
		}
		if size, _ := w.Size(honest.origin); size != 6 {
			t.Errorf("witness %s moved to size %d, want the honest log's 6", w.Name, size)
		}
	}
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		if !forkLogged(f, w.Name) {
			t.Errorf("no FORK error names witness %s:\n%s", w.Name, f.stderr)
		}
	}
	forkCPs := fork.checkpoints(f)
	if len(forkCPs) == 0 {
		t.Fatal("the forked daemon signed no checkpoint")
	}
	// What an auditor holding the witnesses' keys sees: the forked
	// checkpoints carry no cosignature, the honest ones two each.
	for _, cp := range forkCPs {
		if got := cosigners(t, cp, w1, w2); len(got) != 0 {
			t.Errorf("a forked checkpoint is cosigned by %v:\n%s", got, cp)
		}
		if _, err := auditlog.OpenCheckpoint(cp, honest.v); err != nil {
			t.Errorf("a forked checkpoint does not verify with the shared key: %v", err)
		}
	}
	if len(honestCPs) != 2 {
		t.Fatalf("%d honest checkpoints, want 2", len(honestCPs))
	}
	for _, cp := range honestCPs {
		if got := cosigners(t, cp, w1, w2); len(got) != 2 {
			t.Errorf("an honest checkpoint is cosigned by %v, want both:\n%s", got, cp)
		}
	}

	// And writerd audit verify, given the witnesses' keys and quorum 2:
	// the honest log rests on them; the fork, which the key alone passes,
	// is refused.
	f.Stop()
	require := []string{"--key", honest.vkey, "--witness", w1.VerifierKey, "--witness", w2.VerifierKey, "--quorum", "2"}
	r := mustVerifyPasses(t, append([]string{"--data", honest.store.Dir}, require...)...)
	if !strings.HasSuffix(r.stdout, "\nrests on: 2 witnesses, who cosigned the checkpoint of size 6\n") {
		t.Errorf("verify the honest log with its witnesses:\n%s", r.stdout)
	}
	mustVerifyPasses(t, "--data", fork.store.Dir, "--key", fork.vkey)
	r = mustVerifyFails(t, "witnesses: unwitnessed: No checkpoint of the log carries cosignatures of 2 of the 2 witnesses given.", append([]string{"--data", fork.store.Dir}, require...)...)
	if strings.Count(r.stdout, "\n") != 2 {
		t.Errorf("verify the fork with the witnesses:\n%s", r.stdout)
	}
}

// Ensure serve refuses malformed --witness and --witness-quorum values
// at start with one sentence that repeats nothing of the value (a URL may
// hold credentials).
func TestWitness_FlagsRefused(t *testing.T) {
	s, err := torchwood.NewCosignatureSigner("witness.example/w1", ed25519.NewKeyFromSeed(make([]byte, 32)))
	if err != nil {
		t.Fatal(err)
	}
	vkey := s.Verifier().String()
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--witness", "https://user:hunter2secret@w.example"}, "--witness (1 of 1): a witness is VKEY@URL"},
		{[]string{"--witness", vkey + "@ftp://user:hunter2secret@w.example"}, "--witness (1 of 1): the URL after the @"},
		{[]string{"--witness", vkey + "@http://w.example", "--witness", "hunter2secret+x@http://w.example"}, "--witness (2 of 2): the verifier key before the @"},
		{[]string{"--witness", vkey + "@http://a.example", "--witness", vkey + "@http://b.example/hunter2secret"}, "--witness 1 and 2 name the same witness key"},
		{[]string{"--witness", vkey + "@http://a.example", "--witness-quorum", "2"}, "--witness-quorum 2 is more than the 1 witnesses given with --witness"},
		{[]string{"--witness-quorum", "1"}, "--witness-quorum needs --witness VKEY@URL"},
		{[]string{"--witness", vkey + "@http://a.example", "--witness-quorum", "-1"}, "--witness-quorum takes a whole number of witnesses"},
	} {
		r := mustRun(t, append([]string{"serve", "--stdio", "--data", dir}, tt.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 and %q", tt.args, r.code, firstLine(r.stderr), tt.want)
		}
		if strings.Contains(r.stderr, "hunter2secret") {
			t.Errorf("serve %v repeats the value: %q", tt.args, firstLine(r.stderr))
		}
	}
	// From the environment: witnesses separated by spaces, named by the
	// variables.
	s2, err := torchwood.NewCosignatureSigner("witness.example/w2", ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"WRITERD_WITNESS=" + vkey + "@http://a.example " + s2.Verifier().String() + "@http://b.example", "WRITERD_WITNESS_QUORUM=3"}
	r := mustRunWith(t, runConfig{env: env}, "serve", "--stdio", "--data", dir)
	if want := "WRITERD_WITNESS_QUORUM 3 is more than the 2 witnesses given with WRITERD_WITNESS"; r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("serve with %v: exit %d, %q; want 2 and %q", env, r.code, firstLine(r.stderr), want)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
