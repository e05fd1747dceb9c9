package witness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/torchwood"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/auditlog/witness/witnesstest"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/storetest"
)

// testLog is an audit log on a real bbolt store, written through the real
// pipeline, with a checkpointer.
type testLog struct {
	t  testing.TB
	e  *storetest.Env
	cp *auditlog.Checkpointer
	n  int
}

func newLog(t testing.TB, key *auditlog.Key) *testLog {
	t.Helper()
	e := storetest.New(t, storetest.InDir(boltstore.Open), storetest.Options{})
	return &testLog{t: t, e: e, cp: &auditlog.Checkpointer{Storage: pipeline.AuditStorage[handlers.Store](e.Store), Key: key,
		Every: 1, Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)}}
}

func mustKey(t testing.TB, origin string) *auditlog.Key {
	t.Helper()
	k, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "audit.key"), origin, true)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (l *testLog) storage() auditlog.Storage { return l.cp.Storage }

// grow writes n events, with names of the given prefix, and signs a
// checkpoint of them; it returns the checkpoint's size.
func (l *testLog) grow(prefix string, n int) uint64 {
	l.t.Helper()
	for range n {
		l.n++
		storetest.MustOK(l.t, l.e.Call(storetest.Caller, "create_project", fmt.Sprintf(`{"idempotency_key":"key-%s-%05d","name":"%s-%d"}`, prefix, l.n, prefix, l.n)))
	}
	if _, err := l.cp.Sign(context.Background()); err != nil {
		l.t.Fatal(err)
	}
	return uint64(l.n)
}

func (l *testLog) checkpoints() [][]byte {
	l.t.Helper()
	var cps [][]byte
	l.e.View(func(tx pipeline.Tx[handlers.Store]) error {
		var err error
		cps, err = tx.Audit().Checkpoints()
		return err
	})
	return cps
}

func (l *testLog) latest() []byte {
	cps := l.checkpoints()
	return cps[len(cps)-1]
}

// logBuffer collects a logger's JSON lines.
type logBuffer struct{ logtest.Buffer }

// count returns how many lines have a message starting with prefix, at
// level (any level if "").
func (l *logBuffer) count(level, prefix string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		var m struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &m) == nil && strings.HasPrefix(m.Msg, prefix) && (level == "" || m.Level == level) {
			n++
		}
	}
	return n
}

// cosigner makes a cosigner of the log to the witnesses, with fast
// retries, its logs and metrics of its own.
func cosigner(l *testLog, quorum int, ws ...*witnesstest.Litewitness) (*witness.Cosigner, *logBuffer, *prometheus.Registry) {
	l.t.Helper()
	var parsed []*witness.Witness
	for _, w := range ws {
		p, err := witness.Parse(w.Witness())
		if err != nil {
			l.t.Fatal(err)
		}
		parsed = append(parsed, p)
	}
	logs := new(logBuffer)
	reg := prometheus.NewRegistry()
	return &witness.Cosigner{Storage: l.storage(), Key: l.cp.Key, Witnesses: parsed, Quorum: quorum,
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics: metrics.NewWitnesses(reg), RetryFirst: 50 * time.Millisecond, RetryMost: 200 * time.Millisecond}, logs, reg
}

// mustCosigned checks a stored note: the log's signature first, then
// exactly one cosignature of each witness, each verifying with its key,
// and nothing else.
func mustCosigned(t testing.TB, signed []byte, key *auditlog.Key, ws ...*witnesstest.Litewitness) {
	t.Helper()
	if _, err := auditlog.OpenCheckpoint(signed, key.Verifier); err != nil {
		t.Fatalf("the stored checkpoint does not verify with the log's key: %v\n%s", err, signed)
	}
	_, sigs, _ := bytes.Cut(signed, []byte("\n\n"))
	lines := strings.Split(strings.TrimSuffix(string(sigs), "\n"), "\n")
	if len(lines) != 1+len(ws) || !strings.HasPrefix(lines[0], "— "+key.Signer.Name()+" ") {
		t.Fatalf("the stored checkpoint has signature lines %q, want the log's first and one per witness (%d)", lines, len(ws))
	}
	for _, w := range ws {
		v, err := torchwood.NewCosignatureVerifier(w.VerifierKey)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := note.Open(signed, note.VerifierList(v)); err != nil {
			t.Fatalf("witness %s's cosignature does not verify: %v\n%s", w.Name, err, signed)
		}
	}
}

// witnessCount returns how many of the witnesses cosigned the note.
func witnessCount(t testing.TB, signed []byte, ws ...*witnesstest.Litewitness) int {
	t.Helper()
	n := 0
	for _, w := range ws {
		v, err := torchwood.NewCosignatureVerifier(w.VerifierKey)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := note.Open(signed, note.VerifierList(v)); err == nil {
			n++
		}
	}
	return n
}

func counter(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return 0
}

// Ensure every checkpoint a round sees gets both witnesses'
// cosignatures, stored with the log's signature first, one line each;
// that a round with nothing to do sends nothing; and that a new cosigner
// on the same store starts from the sizes the witnesses cosigned.
func TestCosigner_TwoLitewitnesses(t *testing.T) {
	w1, w2 := witnesstest.Start(t, "example.com/w1"), witnesstest.Start(t, "example.com/w2")
	key := mustKey(t, "example.com/log")
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		w.AddLog(key.Signer.Name(), key.VerifierKey)
	}
	l := newLog(t, key)
	c, logs, reg := cosigner(l, 2, w1, w2)
	ctx := context.Background()
	for _, n := range []int{3, 1, 4} {
		size := l.grow("a", n)
		c.Round(ctx)
		mustCosigned(t, l.latest(), key, w1, w2)
		for _, w := range []*witnesstest.Litewitness{w1, w2} {
			if got, ok := w.Size(key.Signer.Name()); !ok || got != size {
				t.Fatalf("witness %s knows size %d, want %d", w.Name, got, size)
			}
		}
	}
	for i, cp := range l.checkpoints() {
		mustCosigned(t, cp, key, w1, w2)
		if _, err := auditlog.OpenCheckpoint(cp, key.Verifier); err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
	}
	before := counter(t, reg, "writerd_audit_witness_requests_total", "witness", "example.com/w1", "result", "cosigned")
	c.Round(ctx) // nothing new
	if after := counter(t, reg, "writerd_audit_witness_requests_total", "witness", "example.com/w1", "result", "cosigned"); after != before || before != 3 {
		t.Fatalf("cosigned requests: %v, then %v after a round with nothing new; want 3, 3", before, after)
	}
	if n := logs.count("WARN", ""); n != 0 {
		t.Fatalf("warnings with every witness up:\n%s", logs)
	}
	// A new cosigner (a restart) believes each witness at the largest
	// size it cosigned, and so sends the next checkpoint with no 409.
	c2, _, reg2 := cosigner(l, 2, w1, w2)
	l.grow("a", 2)
	c2.Round(ctx)
	mustCosigned(t, l.latest(), key, w1, w2)
	for _, w := range []string{"example.com/w1", "example.com/w2"} {
		if got := counter(t, reg2, "writerd_audit_witness_requests_total", "witness", w, "result", "conflict"); got != 0 {
			t.Errorf("witness %s: %v conflicts after a restart, want 0: it starts from the size the store says it cosigned", w, got)
		}
	}
	if got := counter(t, reg2, "writerd_audit_witness_tree_size", "witness", "example.com/w2"); got != 10 {
		t.Errorf("writerd_audit_witness_tree_size = %v, want 10", got)
	}
}

// Ensure a witness that knows a newer tree than the cosigner believes (a
// 409 from a real litewitness) is sent the checkpoint again from its size,
// in the same round.
func TestCosigner_ConflictResendsFromTheWitnessSize(t *testing.T) {
	w := witnesstest.Start(t, "example.com/w1")
	key := mustKey(t, "example.com/log")
	w.AddLog(key.Signer.Name(), key.VerifierKey)
	l := newLog(t, key)
	l.grow("a", 5)
	// Another sender (a replica, an operator) gave the witness the
	// checkpoint; the store keeps no cosignature of it.
	p, err := witness.Parse(w.Witness())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.AddCheckpoint(context.Background(), witness.NewClient(), 0, nil, l.latest()); err != nil {
		t.Fatal(err)
	}
	size := l.grow("a", 3)
	c, _, reg := cosigner(l, 1, w)
	c.Round(context.Background())
	mustCosigned(t, l.latest(), key, w)
	if got := counter(t, reg, "writerd_audit_witness_requests_total", "witness", w.Name, "result", "conflict"); got != 1 {
		t.Fatalf("%v conflicts, want 1 (believed 0, the witness knows 5)", got)
	}
	if got, _ := w.Size(key.Signer.Name()); got != size {
		t.Fatalf("the witness knows %d, want %d", got, size)
	}
}

// Ensure a witness that is down does not keep the others' cosignatures
// from being stored; that the checkpoint without its quorum is counted
// once each and warned about once while the witness stays down, whatever
// the rounds and checkpoints; and that once back, the witness cosigns
// from the size it knows, and the quorum's return is logged.
func TestCosigner_WitnessDownAndBack(t *testing.T) {
	w1, w2 := witnesstest.Start(t, "example.com/w1"), witnesstest.Start(t, "example.com/w2")
	key := mustKey(t, "example.com/log")
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		w.AddLog(key.Signer.Name(), key.VerifierKey)
	}
	l := newLog(t, key)
	c, logs, reg := cosigner(l, 2, w1, w2)
	ctx := context.Background()
	l.grow("a", 2)
	c.Round(ctx)
	mustCosigned(t, l.latest(), key, w1, w2)

	w2.Stop()
	for range 3 {
		l.grow("a", 1)
		for range 3 {
			c.Round(ctx)
			time.Sleep(60 * time.Millisecond) // past the first retry
		}
		if n := witnessCount(t, l.latest(), w1); n != 1 || witnessCount(t, l.latest(), w2) != 0 {
			t.Fatalf("with w2 down: the latest checkpoint has w1's cosignature %d times, want 1, and none of w2", n)
		}
	}
	if got := counter(t, reg, "writerd_audit_witness_quorum_missing"); got != 1 {
		t.Fatalf("writerd_audit_witness_quorum_missing = %v while w2 is down, want 1", got)
	}
	if got := counter(t, reg, "writerd_audit_checkpoints_without_quorum_total"); got != 3 {
		t.Fatalf("writerd_audit_checkpoints_without_quorum_total = %v, want 3 (one per checkpoint)", got)
	}
	if n := logs.count("WARN", "an audit checkpoint lacks its witness quorum"); n != 1 {
		t.Fatalf("%d quorum warnings over 3 checkpoints and 9 rounds, want 1:\n%s", n, logs)
	}
	if n := logs.count("WARN", "a witness did not cosign"); n != 1 {
		t.Fatalf("%d warnings naming the unreachable witness, want 1 (its repetitions at debug level):\n%s", n, logs)
	}
	if got := counter(t, reg, "writerd_audit_witness_requests_total", "witness", "example.com/w2", "result", "unreachable"); got < 2 {
		t.Fatalf("%v unreachable requests to w2, want retries", got)
	}

	w2.Start()
	size := l.grow("a", 1)
	time.Sleep(250 * time.Millisecond) // past the longest retry
	c.Round(ctx)
	mustCosigned(t, l.latest(), key, w1, w2)
	if got, _ := w2.Size(key.Signer.Name()); got != size {
		t.Fatalf("w2 knows %d, want %d", got, size)
	}
	if got := counter(t, reg, "writerd_audit_witness_requests_total", "witness", "example.com/w2", "result", "conflict"); got != 0 {
		t.Fatalf("%v conflicts: the cosigner must resume from the size w2 knows", got)
	}
	if got := counter(t, reg, "writerd_audit_witness_quorum_missing"); got != 0 {
		t.Fatalf("writerd_audit_witness_quorum_missing = %v with both back, want 0", got)
	}
	if logs.count("INFO", "the audit log's latest checkpoint has its witness quorum again") != 1 || logs.count("INFO", "a witness cosigns the audit log again") != 1 {
		t.Fatalf("the quorum's return is not logged once:\n%s", logs)
	}
}

// Ensure a forked log (the same key and origin over other events) is
// refused by both real witnesses with 422 after their 409, logged as a
// fork once per witness and checkpoint, and stored with no cosignature; the honest
// log's checkpoints keep both.
func TestCosigner_ForkRefused(t *testing.T) {
	w1, w2 := witnesstest.Start(t, "example.com/w1"), witnesstest.Start(t, "example.com/w2")
	key := mustKey(t, "example.com/log")
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		w.AddLog(key.Signer.Name(), key.VerifierKey)
	}
	honest := newLog(t, key)
	c, _, _ := cosigner(honest, 2, w1, w2)
	honest.grow("honest", 4)
	c.Round(context.Background())
	honest.grow("honest", 2)
	c.Round(context.Background())

	fork := newLog(t, key)
	f, logs, reg := cosigner(fork, 2, w1, w2)
	fork.grow("fork", 9)
	f.Round(context.Background())
	time.Sleep(60 * time.Millisecond)
	f.Round(context.Background()) // a retry: no second error line
	for _, w := range []string{"example.com/w1", "example.com/w2"} {
		if got := counter(t, reg, "writerd_audit_witness_requests_total", "witness", w, "result", "fork"); got != 2 {
			t.Errorf("witness %s answered 422 %v times, want 2 (a round and its retry)", w, got)
		}
		// Believed at 0, it says 6; the retry starts from 6.
		if got := counter(t, reg, "writerd_audit_witness_requests_total", "witness", w, "result", "conflict"); got != 1 {
			t.Errorf("witness %s answered 409 %v times, want 1 (the first round's, before its 422)", w, got)
		}
	}
	if n := logs.count("ERROR", "FORK:"); n != 2 {
		t.Fatalf("%d fork errors, want one per witness for the checkpoint:\n%s", n, logs)
	}
	for _, cp := range fork.checkpoints() {
		if n := witnessCount(t, cp, w1, w2); n != 0 {
			t.Fatalf("a forked checkpoint carries %d witness cosignatures:\n%s", n, cp)
		}
	}
	for _, cp := range honest.checkpoints() {
		mustCosigned(t, cp, key, w1, w2)
	}
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		if got, _ := w.Size(key.Signer.Name()); got != 6 {
			t.Fatalf("witness %s moved to %d, want the honest log's 6", w.Name, got)
		}
	}
}

// Ensure a witness that does not know the log (404) or its key (403) is
// named with what to run on it, and that once the operator adds them the
// next round is cosigned.
func TestCosigner_UnknownLogAndKey(t *testing.T) {
	w := witnesstest.Start(t, "example.com/w1")
	key := mustKey(t, "example.com/log")
	l := newLog(t, key)
	c, logs, reg := cosigner(l, 1, w)
	l.grow("a", 2)
	c.Round(context.Background())
	if got := counter(t, reg, "writerd_audit_witness_requests_total", "witness", w.Name, "result", "unknown_log"); got != 1 {
		t.Fatalf("%v unknown_log answers, want 1", got)
	}
	if !strings.Contains(logs.String(), "witnessctl add-log -db DB -origin example.com/log") {
		t.Fatalf("the log does not say what to run on the witness:\n%s", logs)
	}
	other := mustKey(t, "example.com/log")
	w.AddLog(key.Signer.Name(), other.VerifierKey) // the wrong key
	time.Sleep(60 * time.Millisecond)
	c.Round(context.Background())
	if got := counter(t, reg, "writerd_audit_witness_requests_total", "witness", w.Name, "result", "unknown_key"); got != 1 {
		t.Fatalf("%v unknown_key answers, want 1:\n%s", got, logs)
	}
	// The right key, beside the wrong one.
	w.AddKey(key.Signer.Name(), key.VerifierKey)
	time.Sleep(120 * time.Millisecond)
	c.Round(context.Background())
	mustCosigned(t, l.latest(), key, w)
}

// Ensure a cosigner that does not lead sends nothing and stores nothing,
// asks again no sooner than a second later, and sends once it leads.
func TestCosigner_OnlyTheLeaderSends(t *testing.T) {
	w := witnesstest.Start(t, "example.com/w1")
	key := mustKey(t, "example.com/log")
	w.AddLog(key.Signer.Name(), key.VerifierKey)
	l := newLog(t, key)
	c, _, reg := cosigner(l, 1, w)
	leads := false
	c.Lead = func(context.Context) bool { return leads }
	l.grow("a", 2)
	c.Round(context.Background())
	if n := witnessCount(t, l.latest(), w); n != 0 || counter(t, reg, "writerd_audit_witness_requests_total", "witness", w.Name, "result", "cosigned") != 0 {
		t.Fatal("a cosigner that does not lead sent the checkpoint")
	}
	leads = true
	c.Round(context.Background()) // Lead is asked at most once a second
	if n := witnessCount(t, l.latest(), w); n != 0 {
		t.Fatal("Lead was asked again within a second")
	}
	time.Sleep(time.Second)
	c.Round(context.Background())
	mustCosigned(t, l.latest(), key, w)
}

// Ensure Run sends a checkpoint as soon as it is poked, and stops with
// its context.
func TestCosigner_RunAndPoke(t *testing.T) {
	w := witnesstest.Start(t, "example.com/w1")
	key := mustKey(t, "example.com/log")
	w.AddLog(key.Signer.Name(), key.VerifierKey)
	l := newLog(t, key)
	c, _, _ := cosigner(l, 1, w)
	c.Poll = time.Hour // only pokes
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	l.grow("a", 3)
	c.Poke()
	deadline := time.Now().Add(5 * time.Second)
	for witnessCount(t, l.latest(), w) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a poked cosigner did not send the checkpoint within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
	var nilCosigner *witness.Cosigner
	nilCosigner.Poke()
	nilCosigner.Run(ctx)
	nilCosigner.Round(ctx)
}

// Ensure a stored checkpoint that does not verify with the log's key
// (signed by another key of the log's name, or the log's signature over
// other text) never reaches a witness, even one that would cosign
// anything: the witness gets no request, the store keeps the checkpoint
// as it was, and the cosigner logs it once.
func TestCosigner_ForgedCheckpointNeverSent(t *testing.T) {
	for _, tt := range []struct {
		name  string
		forge func(t *testing.T, signed []byte) []byte
	}{
		{"another key of the log's name", func(t *testing.T, signed []byte) []byte {
			cp, err := auditlog.ParseSigned(signed)
			if err != nil {
				t.Fatal(err)
			}
			b, err := cp.Sign(mustKey(t, cp.Origin).Signer)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"the log's signature over another root", func(t *testing.T, signed []byte) []byte {
			cp, err := auditlog.ParseSigned(signed)
			if err != nil {
				t.Fatal(err)
			}
			_, sig, _ := bytes.Cut(signed, []byte("\n\n"))
			other := auditlog.Checkpoint{Origin: cp.Origin, Size: cp.Size, Root: tlog.RecordHash([]byte("another tree"))}
			return append([]byte(other.Text()+"\n"), sig...)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := mustKey(t, "example.com/log")
			l := newLog(t, key)
			f := newFake(t, "witness.example/any")
			f.handle = func(w http.ResponseWriter, _ string, _ []string, s []byte) { w.Write(f.cosign(s)) }
			logs := new(logBuffer)
			c := &witness.Cosigner{Storage: l.storage(), Key: key, Witnesses: []*witness.Witness{f.witness(t)}, Quorum: 1,
				Logger: slog.New(slog.NewJSONHandler(logs, nil)), RetryFirst: time.Millisecond, RetryMost: time.Millisecond}
			l.grow("a", 3)
			c.Round(context.Background())
			if n := f.hits.Load(); n != 1 {
				t.Fatalf("the witness got %d requests for the log's honest checkpoint, want 1", n)
			}
			// The checkpoint of size 5, replaced in the store by a forged one.
			size := l.grow("a", 2)
			forged := tt.forge(t, l.latest())
			if _, err := auditlog.OpenCheckpoint(forged, key.Verifier); err == nil {
				t.Fatal("the forged checkpoint verifies with the log's key")
			}
			l.e.Update(func(tx pipeline.Tx[handlers.Store]) error { return tx.Audit().PutCheckpoint(size, forged) })
			for range 3 {
				c.Round(context.Background())
				time.Sleep(5 * time.Millisecond)
			}
			if n := f.hits.Load(); n != 1 {
				t.Fatalf("the witness got %d requests after the forged checkpoint was stored, want none: it was sent", n-1)
			}
			if got := l.latest(); !bytes.Equal(got, forged) {
				t.Fatalf("the stored checkpoint changed:\n%s\nwant it as forged:\n%s", got, forged)
			}
			if n := logs.count("ERROR", "the latest audit checkpoint does not verify with the log's key"); n != 1 {
				t.Fatalf("%d errors saying the checkpoint does not verify, want 1:\n%s", n, logs)
			}
		})
	}
}
