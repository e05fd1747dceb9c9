package auditlog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/bolt/bolttest"
)

// testLog is a real bbolt store of the built-in tools, whose audit log the
// tests append to directly, close, damage with bolttest as someone who
// can write the file would, and open again under the same checkpointer:
// what a daemon's store is to it.
type testLog struct {
	t     *testing.T
	dir   string
	mu    sync.Mutex
	s     *bolt.Storage[handlers.Store]
	key   *auditlog.Key
	state string // the checkpointer's state file, beside the key
	n     int    // events appended
}

func newTestLog(t *testing.T) *testLog {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "audit.key")
	key, err := auditlog.LoadKey(keyFile, "writerd/selfcheck-test", true)
	if err != nil {
		t.Fatal(err)
	}
	l := &testLog{t: t, dir: t.TempDir(), key: key, state: auditlog.StatePath(keyFile)}
	l.open()
	t.Cleanup(func() { l.store().Close() })
	return l
}

func (l *testLog) open() {
	l.t.Helper()
	s, err := boltstore.Open(l.dir)
	if err != nil {
		l.t.Fatal(err)
	}
	l.mu.Lock()
	l.s = s
	l.mu.Unlock()
}

func (l *testLog) store() *bolt.Storage[handlers.Store] {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s
}

// View and Update make the log a Storage that outlives a reopen.
func (l *testLog) View(ctx context.Context, fn func(auditlog.Reader) error) error {
	return pipeline.AuditStorage[handlers.Store](l.store()).View(ctx, fn)
}

func (l *testLog) Update(ctx context.Context, fn func(auditlog.Writer) error) error {
	return pipeline.AuditStorage[handlers.Store](l.store()).Update(ctx, fn)
}

// append appends n events, each in a write of its own.
func (l *testLog) append(n int) {
	l.t.Helper()
	for range n {
		l.appendAs("agent")
	}
}

// appendAs appends the next event, as principal.
func (l *testLog) appendAs(principal string) {
	l.t.Helper()
	{
		l.n++
		e := &auditlog.Event{Time: time.Date(2026, 12, 1, 9, 0, l.n, 0, time.UTC), RequestID: fmt.Sprintf("req-%06d", l.n),
			Principal: principal, Transport: "go", Tool: "create_widget", IdempotencyKey: fmt.Sprintf("k-%08d", l.n), Digest: "ab", Outcome: auditlog.OK}
		err := l.store().Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error { return tx.Audit().Append(e) })
		if err != nil {
			l.t.Fatal(err)
		}
	}
}

// damage closes the store, changes its file with fn and opens it again.
func (l *testLog) damage(fn func(bolttest.Tx) error) {
	l.t.Helper()
	if err := l.store().Close(); err != nil {
		l.t.Fatal(err)
	}
	bolttest.Update(l.t, l.dir, fn)
	l.open()
}

// editEvent replaces old with new in event seq's JSON, its leaf check
// left as appended.
func (l *testLog) editEvent(seq uint64, old, new string) {
	l.t.Helper()
	l.damage(func(tx bolttest.Tx) error {
		v := tx.Event(l.t, seq)
		edited := bytes.Replace(v[bolttest.JSONStart(seq):], []byte(old), []byte(new), 1)
		if bytes.Equal(edited, v[bolttest.JSONStart(seq):]) {
			l.t.Fatalf("event %d holds no %s", seq, old)
		}
		return tx.Events().Put(bolttest.SeqKey(seq), slices.Concat(v[:bolttest.JSONStart(seq)], edited))
	})
}

func (l *testLog) checkpointer() *auditlog.Checkpointer {
	return &auditlog.Checkpointer{Storage: l, Key: l.key, Every: 1000, Interval: time.Hour, State: l.state,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// sizes returns the sizes of the stored checkpoints.
func (l *testLog) sizes() []uint64 {
	l.t.Helper()
	var sizes []uint64
	err := l.View(context.Background(), func(r auditlog.Reader) error {
		cps, err := r.Checkpoints()
		for _, s := range cps {
			c, err := auditlog.ParseSigned(s)
			if err != nil {
				return err
			}
			sizes = append(sizes, c.Size)
		}
		return err
	})
	if err != nil {
		l.t.Fatal(err)
	}
	return sizes
}

func mustSign(t *testing.T, cp *auditlog.Checkpointer) {
	t.Helper()
	if signed, err := cp.Sign(context.Background()); err != nil || !signed {
		t.Fatalf("Sign = %v, %v; want a checkpoint", signed, err)
	}
}

// mustDamage asserts err is the self-check's, at seq, of kind.
func mustDamage(t *testing.T, err error, seq uint64, kind string) *auditlog.DamageError {
	t.Helper()
	var d *auditlog.DamageError
	if !errors.As(err, &d) {
		t.Fatalf("error %v, want the log's damage at event %d", err, seq)
	}
	if d.Problem.Seq != seq || d.Problem.Kind != kind {
		t.Fatalf("damage %+v, want event %d %s", d.Problem, seq, kind)
	}
	return d
}

// Ensure Sign verifies the events appended since the tree it verified
// before it signs: one whose bytes were edited after it was appended, and
// before any checkpoint covered it, is named, and nothing is signed then,
// nor after more events, by that checkpointer; the record beside the key
// still holds the last checkpoint signed over a sound log.
func TestSign_RefusesAnEventEditedSinceTheLastCheckpoint(t *testing.T) {
	l := newTestLog(t)
	cp := l.checkpointer()
	l.append(5)
	mustSign(t, cp)
	l.append(3)
	l.editEvent(7, `"agent"`, `"admin"`)

	signed, err := cp.Sign(context.Background())
	d := mustDamage(t, err, 7, auditlog.ProblemEdited)
	if signed {
		t.Error("Sign reports a checkpoint over the edited log")
	}
	if want := "the audit log fails its check at event 7: event 7 was changed after it was appended: its bytes no longer hash to its leaf"; d.Error() != want {
		t.Errorf("the sentence is %q, want %q", d.Error(), want)
	}
	if got := l.sizes(); !slices.Equal(got, []uint64{5}) {
		t.Errorf("checkpoints %v, want only the one of 5", got)
	}
	if cp.Damaged() == nil {
		t.Error("the checkpointer does not say it stopped")
	}
	if size, damaged := cp.Verified(); size != 5 || !damaged {
		t.Errorf("Verified = %d, %v; want 5 and damaged", size, damaged)
	}
	l.append(4)
	if _, err := cp.Sign(context.Background()); !errors.Is(err, cp.Damaged()) {
		t.Errorf("Sign after more events: %v, want the same damage", err)
	}
	if got := l.sizes(); !slices.Equal(got, []uint64{5}) {
		t.Errorf("checkpoints after more events %v, want only the one of 5", got)
	}
	remembered, c, err := auditlog.ReadState(l.state, l.key.Verifier)
	if err != nil || c == nil || c.Size != 5 {
		t.Fatalf("the state file: %v, %v; want the checkpoint of 5", c, err)
	}
	l.View(context.Background(), func(r auditlog.Reader) error {
		_, latest, err := r.LatestCheckpoint()
		if err != nil || !bytes.Equal(latest, remembered) {
			t.Errorf("the state file holds %q, the log's latest checkpoint is %q (%v)", remembered, latest, err)
		}
		return nil
	})
}

// Ensure a checkpointer starting on a log whose events after the
// checkpoint it remembers were damaged while it was down refuses it at
// Start, naming the first bad event as writerd audit verify does: edited,
// deleted, swapped.
func TestStart_RefusesDamageAfterTheRememberedCheckpoint(t *testing.T) {
	for _, tt := range []struct {
		name   string
		damage func(l *testLog)
		seq    uint64
		kind   string
	}{
		{"edited", func(l *testLog) { l.editEvent(9, `"agent"`, `"admin"`) }, 9, auditlog.ProblemEdited},
		{"deleted", func(l *testLog) {
			l.damage(func(tx bolttest.Tx) error { return tx.Events().Delete(bolttest.SeqKey(8)) })
		}, 8, auditlog.ProblemMissing},
		{"swapped", func(l *testLog) {
			l.damage(func(tx bolttest.Tx) error {
				a, b := tx.Event(t, 7), tx.Event(t, 9) // of one layout: one leaf check, no inner hash
				if err := tx.Events().Put(bolttest.SeqKey(7), b); err != nil {
					return err
				}
				return tx.Events().Put(bolttest.SeqKey(9), a)
			})
		}, 7, auditlog.ProblemReordered},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newTestLog(t)
			l.append(6)
			mustSign(t, l.checkpointer())
			l.append(4)
			tt.damage(l)
			cp := l.checkpointer() // a restart
			mustDamage(t, cp.Start(context.Background()), tt.seq, tt.kind)
			if _, err := cp.Sign(context.Background()); !errors.Is(err, cp.Damaged()) || err == nil {
				t.Errorf("Sign after a failed start: %v", err)
			}
			if got := l.sizes(); !slices.Equal(got, []uint64{6}) {
				t.Errorf("checkpoints %v, want only the one of 6", got)
			}
		})
	}
}

// Ensure a checkpointer refuses, at Start, a log that is not an extension
// of the checkpoint it remembers signing: a log rewritten with one event
// changed, its hashes recomputed and its checkpoints re-signed with the
// key (which verifies on its own); and a log cut short of it.
func TestStart_RefusesALogThatDoesNotExtendTheRememberedCheckpoint(t *testing.T) {
	l := newTestLog(t)
	l.append(8)
	mustSign(t, l.checkpointer())

	// The rewrite: the same events anew in a fresh store, event 3 changed,
	// signed with the same key by a checkpointer that remembers nothing.
	r := newTestLog(t)
	r.key = l.key
	r.append(2)
	r.appendAs("admin") // event 3 is another one
	r.append(5)
	fresh := r.checkpointer()
	fresh.State = ""
	mustSign(t, fresh)
	if r.sizes()[0] != 8 {
		t.Fatalf("the rewrite's checkpoints: %v", r.sizes())
	}
	cp := r.checkpointer()
	cp.State = l.state // the daemon's record of what it signed, which survived
	err := cp.Start(context.Background())
	d := mustDamage(t, err, 1, auditlog.ProblemNotExtension)
	if d.Signed != 8 || !strings.HasPrefix(d.Error(), "the audit log is not an extension of the checkpoint writerd last signed (size 8): ") {
		t.Errorf("the sentence: %q (signed %d)", d.Error(), d.Signed)
	}
	if !d.Forked() || d.Size != 8 || !strings.HasSuffix(d.Error(), "; this store's log is not the one that checkpoint signed: it was edited or rewritten, or it is a fork of one log under one key (a backup or copy served beside its original?)") {
		t.Errorf("the rewrite is not named a fork: %q (size %d)", d.Error(), d.Size)
	}
	if _, err := cp.Sign(context.Background()); err == nil {
		t.Error("Sign over the rewrite succeeded")
	}

	// Cut short: events 7 and 8 gone, the checkpoint of 8 kept.
	l.damage(func(tx bolttest.Tx) error {
		for seq := uint64(7); seq <= 8; seq++ {
			if err := tx.Events().Delete(bolttest.SeqKey(seq)); err != nil {
				return err
			}
		}
		return nil
	})
	d = mustDamage(t, l.checkpointer().Start(context.Background()), 7, auditlog.ProblemMissing)
	if d.Signed != 8 || !strings.Contains(d.Error(), "events 7 to 8 are missing") {
		t.Errorf("the sentence of the cut log: %q", d.Error())
	}
}

// Ensure a log behind the checkpoint remembered for its origin, as the
// original of a copy that was served and signed past it is (a log of the
// same key, shorter), is named a fork of one log under one key at Start.
func TestStart_NamesALogBehindItsRecordAFork(t *testing.T) {
	served := newTestLog(t)
	served.append(5)
	mustSign(t, served.checkpointer()) // the copy signs 5
	orig := newTestLog(t)
	orig.key = served.key
	orig.append(3)
	cp := orig.checkpointer()
	cp.State = served.state // one record per origin: the copy's
	err := cp.Start(context.Background())
	var d *auditlog.DamageError
	if !errors.As(err, &d) || !d.Forked() || d.Signed != 5 || d.Size != 3 {
		t.Fatalf("Start = %v, want a fork of the record of 5 over a log of 3", err)
	}
	if want := "; this store's log is behind the checkpoint signed last for its origin: it is a fork of one log under one key (a backup or copy served beside its original, which signed past it?), a backup put in place without writerd restore, or a log cut short"; !strings.HasSuffix(d.Error(), want) {
		t.Errorf("the sentence: %q", d.Error())
	}
}

// Ensure a state file that does not verify with the log's key (another
// log's) stops Start with one sentence naming the file, and not as damage.
func TestStart_RefusesAStateFileOfAnotherKey(t *testing.T) {
	l := newTestLog(t)
	l.append(2)
	other := newTestLog(t)
	other.append(1)
	mustSign(t, other.checkpointer())
	cp := l.checkpointer()
	cp.State = other.state
	err := cp.Start(context.Background())
	var se *auditlog.StateError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), other.state) || cp.Damaged() != nil {
		t.Fatalf("Start = %v, want a StateError naming %s", err, other.state)
	}
}

// Ensure the full pass finds damage before the last checkpoint, which the
// start-up check (the events since it) does not read: in any chunk of its
// reads, named as writerd audit verify names it, the whole log verified
// alike. An untouched log of 2,500 events (three chunks) passes.
func TestLogCheck_FindsDamageBeforeTheLastCheckpoint(t *testing.T) {
	l := newTestLog(t)
	l.append(2500)
	mustSign(t, l.checkpointer())
	remembered, _, err := auditlog.ReadState(l.state, l.key.Verifier)
	if err != nil {
		t.Fatal(err)
	}
	check := auditlog.LogCheck{Key: l.key.Verifier, Remembered: remembered}
	if size, d, err := check.Run(context.Background(), l); err != nil || d != nil || size != 2500 {
		t.Fatalf("the untouched log: %d, %v, %v", size, d, err)
	}
	l.editEvent(1500, `"agent"`, `"admin"`)
	if err := l.checkpointer().Start(context.Background()); err != nil {
		t.Fatalf("Start reads only the events since the checkpoint, none: %v", err)
	}
	_, d, err := check.Run(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	mustDamage(t, d, 1500, auditlog.ProblemEdited)
	// What verify says of the whole log, with the same checkpoints.
	l.View(context.Background(), func(r auditlog.Reader) error {
		cps, _ := r.Checkpoints()
		v, err := auditlog.Verify(auditlog.Input{Key: l.key.Verifier, Checkpoints: cps, Against: [][]byte{remembered}, Events: r.Leaves(1)})
		if err != nil || v.OK() || v.Problems[0] != d.Problem {
			t.Errorf("verify says %+v (%v), the pass %+v", v.Problems, err, d.Problem)
		}
		return nil
	})
}

// Ensure the full pass keeps to its rate: at each tree it verified, it is
// at most one read (checkChunk, 1,000 events) ahead of the rate, and 3,000
// events at 6,000 a second take at least half a second.
func TestLogCheck_KeepsItsRate(t *testing.T) {
	l := newTestLog(t)
	l.append(3000)
	start := time.Now()
	var mu sync.Mutex
	var early []string
	check := auditlog.LogCheck{Rate: 6000, Progress: func(size uint64) {
		mu.Lock()
		defer mu.Unlock()
		if due := time.Duration(float64(size-1000) / 6000 * float64(time.Second)); time.Since(start) < due {
			early = append(early, fmt.Sprintf("%d at %v, before %v", size, time.Since(start), due))
		}
	}}
	size, d, err := check.Run(context.Background(), l)
	took := time.Since(start)
	if err != nil || d != nil || size != 3000 {
		t.Fatalf("Run = %d, %v, %v", size, d, err)
	}
	if len(early) > 0 || took < 500*time.Millisecond {
		t.Errorf("the pass ran ahead of its rate: %v; took %v, want at least 500ms", early, took)
	}
	if took > 10*time.Second {
		t.Errorf("the pass took %v", took)
	}
}

// Ensure Every signs as soon as the events are appended, at exactly the
// multiples of Every, without waiting for the poll (once a second): each
// checkpoint within 300ms of its event; and a last one of the whole log at
// the stop.
func TestRun_SignsEveryNAtOnceAndAtExactSizes(t *testing.T) {
	l := newTestLog(t)
	cp := l.checkpointer()
	cp.Every = 3
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cp.Run(ctx) }()
	for i := 1; i <= 10; i++ {
		l.append(1)
		at := time.Now()
		cp.Appended()
		if i%3 != 0 {
			continue
		}
		for sizes := l.sizes(); len(sizes) == 0 || sizes[len(sizes)-1] != uint64(i); sizes = l.sizes() {
			if time.Since(at) > 300*time.Millisecond {
				cancel()
				<-done
				t.Fatalf("no checkpoint of %d within 300ms of its event: %v", i, sizes)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	cancel()
	<-done
	if got := l.sizes(); !slices.Equal(got, []uint64{3, 6, 9, 10}) {
		t.Errorf("checkpoints %v, want 3, 6, 9 and the last, 10", got)
	}
}

// Ensure Every signs each multiple of Every the log passed since the
// latest checkpoint, not only the largest: 7 events appended while no
// checkpointer ran, Every 3, give the trees of 3 and 6, not 7 (the
// interval rule, an hour, signs the log as it is: at the stop, 7). At
// most maxCatchUp multiples are signed in one pass (TestDueMultiples).
func TestRun_SignsEveryMultipleOfEveryItMissed(t *testing.T) {
	l := newTestLog(t)
	l.append(7)
	cp := l.checkpointer()
	cp.Every = 3
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cp.Run(ctx) }()
	cp.Appended()
	for at := time.Now(); len(l.sizes()) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Since(at) > 300*time.Millisecond {
			break
		}
	}
	if got := l.sizes(); !slices.Equal(got, []uint64{3, 6}) {
		t.Errorf("checkpoints %v, want the trees of 3 and 6", got)
	}
	cancel()
	<-done
	if got := l.sizes(); !slices.Equal(got, []uint64{3, 6, 7}) {
		t.Errorf("checkpoints after the stop %v, want 3, 6 and 7", got)
	}
}

// Ensure the state file is replaced whole: its directory holds the file
// and nothing left of a write, mode 0600.
func TestSign_KeepsTheStateFileWhole(t *testing.T) {
	l := newTestLog(t)
	cp := l.checkpointer()
	for range 3 {
		l.append(2)
		mustSign(t, cp)
	}
	entries, err := os.ReadDir(filepath.Dir(l.state))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"audit.key", "audit.key.last-checkpoint"}) {
		t.Errorf("the key's directory holds %v", names)
	}
	fi, err := os.Stat(l.state)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the state file: %v %v, want mode 0600", fi.Mode(), err)
	}
	if _, c, err := auditlog.ReadState(l.state, l.key.Verifier); err != nil || c.Size != 6 {
		t.Errorf("the state file: %+v %v, want the checkpoint of 6", c, err)
	}
}
