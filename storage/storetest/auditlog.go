package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// checkpointer signs checkpoints of the env's log with a key of its own.
func checkpointer(t testing.TB, e *Env) *auditlog.Checkpointer {
	t.Helper()
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "audit.key"), "writerd/storetest", true)
	if err != nil {
		t.Fatal(err)
	}
	return &auditlog.Checkpointer{Storage: pipeline.AuditStorage[handlers.Store](e.Store), Key: key, Every: 1, Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func mustSign(t testing.TB, cp *auditlog.Checkpointer) bool {
	t.Helper()
	signed, err := cp.Sign(context.Background())
	if err != nil {
		t.Fatalf("sign a checkpoint: %v", err)
	}
	return signed
}

// verify runs auditlog.Verify over the stored log and its checkpoints.
func verify(t testing.TB, e *Env, key *auditlog.Key) *auditlog.Verification {
	t.Helper()
	var v *auditlog.Verification
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		cps, err := tx.Audit().Checkpoints()
		if err != nil {
			return err
		}
		v, err = auditlog.Verify(auditlog.Input{Key: key.Verifier, Checkpoints: cps, Events: tx.Audit().Leaves(1)})
		return err
	})
	return v
}

// event is a successful write at tm that touched nothing it names.
func event(tm time.Time, key string) *auditlog.Event {
	return &auditlog.Event{Time: tm, RequestID: "01JGHJ0QZ5CCCCCCCCCCCCCCCC", Principal: "local", Transport: "go",
		Tool: "create_project", IdempotencyKey: key, Digest: "ab", Outcome: auditlog.OK}
}

func testAppend(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	// An append in a write that rolls back leaves no event, and no id.
	failed := errors.New("the write failed")
	lost := event(e.Now(), "key-lost-01")
	err := e.Store.Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
		if err := tx.Audit().Append(lost); err != nil {
			return err
		}
		if err := tx.Audit().Append(event(e.Now(), "key-lost-02")); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("Update = %v, want the fn's error", err)
	}
	var evs []*auditlog.Event
	appendAll := func(n int) {
		e.Update(func(tx pipeline.Tx[handlers.Store]) error {
			for range n {
				ev := event(e.Now().Add(time.Duration(len(evs))*time.Second), fmt.Sprintf("key-%08d", len(evs)))
				if err := tx.Audit().Append(ev); err != nil {
					return err
				}
				evs = append(evs, ev)
			}
			return nil
		})
	}
	appendAll(1) // across transactions and within one
	appendAll(1)
	appendAll(5)
	e.Numbered(evs...)
	ids := map[string]bool{}
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Errorf("event %d: seq %d, want %d (dense from 1 after the rollback)", i, ev.Seq, i+1)
		}
		id, err := ulid.ParseStrict(ev.ID)
		if err != nil {
			t.Fatalf("event %d: id %q is not a ULID: %v", i, ev.ID, err)
		}
		if got := ulid.Time(id.Time()); !got.Equal(ev.Time.Truncate(time.Millisecond)) {
			t.Errorf("event %d: its ULID's time %v is not its own %v", i, got, ev.Time)
		}
		if i > 0 && ev.ID <= evs[i-1].ID {
			t.Errorf("event %d: id %s does not follow %s", i, ev.ID, evs[i-1].ID)
		}
		ids[ev.ID] = true
	}
	if len(ids) != len(evs) {
		t.Errorf("%d distinct ids for %d events", len(ids), len(evs))
	}
	// A clock that steps back: the event keeps the log's order.
	back := event(Start.Add(-time.Hour), "key-back-01")
	e.Update(func(tx pipeline.Tx[handlers.Store]) error { return tx.Audit().Append(back) })
	e.Numbered(back)
	if last := evs[len(evs)-1]; back.Time.Before(last.Time) || back.ID <= last.ID {
		t.Errorf("an event dated before the last one: time %v, id %s after %v, %s", back.Time, back.ID, last.Time, last.ID)
	}
	evs = append(evs, back)
	if got := e.Events(); !reflect.DeepEqual(got, evs) {
		t.Fatalf("the log holds %+v, want the events as appended, %+v", got, evs)
	}
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		if _, err := auditlog.ByID(tx.Audit(), lost.ID); lost.ID != "" && !errors.Is(err, auditlog.ErrNotFound) {
			t.Errorf("ByID of a rolled-back event: %v, want ErrNotFound", err)
		}
		return nil
	})
}

func testDenseTree(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	cp := checkpointer(t, e)
	var wg sync.WaitGroup
	for i := range 24 {
		tool, cause := "create_project", ""
		switch i % 4 {
		case 1:
			tool, cause = "test_fail", "refusal"
		case 2:
			tool = "test_panic"
		}
		wg.Go(func() { e.Call(Caller, tool, testArgs(fmt.Sprintf("key-%08d", i), fmt.Sprintf("p-%d", i), cause)) })
		if i%8 == 7 {
			wg.Wait()
			mustSign(t, cp)
		}
	}
	// Writes that roll back with their events leave no gap either.
	for i := range 3 {
		err := e.Store.Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
			if _, err := putProject(tx, e.Now(), fmt.Sprintf("rolled-back-%d", i)); err != nil {
				return err
			}
			return errors.New("roll back")
		})
		if err == nil {
			t.Fatal("a failing write committed")
		}
	}
	MustOK(t, e.Call(Caller, "create_project", projectArgs("key-last-0001", "last")))
	evs := e.Events()
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: the sequence is not dense", i+1, ev.Seq)
		}
	}
	v := verify(t, e, cp.Key)
	if !v.OK() || v.Events != uint64(len(evs)) || v.Checkpoints != 3 {
		t.Fatalf("Verify: %+v, want %d events and 3 checkpoints verified", v, len(evs))
	}
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		root, err := auditlog.TreeHash(tx.Audit(), uint64(len(evs)))
		if err != nil || root != v.Root {
			t.Errorf("TreeHash = %x, %v; the tree of the events is %x", root, err, v.Root)
		}
		return nil
	})
}

func testCheckpoints(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	cp := checkpointer(t, e)
	if mustSign(t, cp) {
		t.Fatal("signed a checkpoint of the empty log")
	}
	written := 0
	write := func(n int) {
		for range n {
			written++
			MustOK(t, e.Call(Caller, "create_project", projectArgs(fmt.Sprintf("key-%08d", written), fmt.Sprintf("p-%d", written))))
		}
	}
	write(3)
	if !mustSign(t, cp) || mustSign(t, cp) {
		t.Fatal("want one checkpoint of a grown log, and none of a log that did not grow")
	}
	write(2)
	mustSign(t, cp)
	write(2) // after the latest checkpoint: not exported
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		log := tx.Audit()
		cps, err := log.Checkpoints()
		if err != nil || len(cps) != 2 {
			t.Fatalf("Checkpoints = %d, %v, want 2", len(cps), err)
		}
		var trees []auditlog.Checkpoint
		for _, s := range cps {
			c, err := auditlog.OpenCheckpoint(s, cp.Key.Verifier)
			if err != nil {
				t.Fatalf("a stored checkpoint does not open: %v", err)
			}
			trees = append(trees, c)
		}
		if trees[0].Size != 3 || trees[1].Size != 5 || trees[1].Origin != cp.Key.Signer.Name() {
			t.Fatalf("checkpoints of sizes %d and %d, want 3 and 5, smallest first", trees[0].Size, trees[1].Size)
		}
		size, latest, err := log.LatestCheckpoint()
		if err != nil || size != 5 || !bytes.Equal(latest, cps[1]) {
			t.Fatalf("LatestCheckpoint = %d, %v, want the one of size 5", size, err)
		}
		for seq := uint64(1); seq <= 5; seq++ {
			leaf, err := log.Leaf(seq)
			if err != nil {
				t.Fatal(err)
			}
			proof, err := auditlog.InclusionProof(log, 5, seq)
			if err != nil || tlog.CheckRecord(proof, 5, trees[1].Root, int64(seq-1), tlog.RecordHash(leaf)) != nil {
				t.Fatalf("the inclusion proof of event %d does not check (%v)", seq, err)
			}
		}
		proof, err := auditlog.ConsistencyProof(log, 3, 5)
		if err != nil || tlog.CheckTree(proof, 5, trees[1].Root, 3, trees[0].Root) != nil {
			t.Fatalf("the consistency proof of 3 in 5 does not check (%v)", err)
		}
		for name, err := range map[string]error{
			"InclusionProof past the tree":             errOf(auditlog.InclusionProof(log, 5, 6)),
			"InclusionProof of a tree the log has not": errOf(auditlog.InclusionProof(log, 8, 1)),
			"ConsistencyProof from 0":                  errOf(auditlog.ConsistencyProof(log, 0, 5)),
			"ConsistencyProof past the log":            errOf(auditlog.ConsistencyProof(log, 3, 8)),
			"TreeHash past the log":                    errOf(auditlog.TreeHash(log, 8)),
		} {
			if !errors.Is(err, auditlog.ErrNotFound) {
				t.Errorf("%s: %v, want ErrNotFound", name, err)
			}
		}
		// Exports from the start and from the middle verify with no store.
		for _, from := range []uint64{1, 4, 6} {
			var buf bytes.Buffer
			if err := auditlog.Export(log, &buf, from, cp.Key.VerifierKey); err != nil {
				t.Fatal(err)
			}
			export := bytes.Clone(buf.Bytes())
			h, events, err := auditlog.ReadExport(&buf)
			if err != nil {
				t.Fatal(err)
			}
			v, err := auditlog.Verify(auditlog.Input{Key: cp.Key.Verifier, Checkpoints: [][]byte{[]byte(h.Checkpoint)}, Prefix: h.Prefix, Events: events})
			if err != nil || !v.OK() || v.Events != 5 || h.Prefix.Size != from-1 || h.VerifierKey != cp.Key.VerifierKey {
				t.Fatalf("the export from %d: %+v, %v; want 5 events verified after a prefix of %d", from, v, err, from-1)
			}
			if n := bytes.Count(export, []byte("\n")); n != 1+int(6-from) {
				t.Fatalf("the export from %d has %d lines, want the header and the events through the checkpoint", from, n)
			}
			if from == 6 {
				continue
			}
			edited := bytes.Replace(export, []byte(`"key-00000004"`), []byte(`"key-0000000X"`), 1)
			if bytes.Equal(edited, export) {
				t.Fatal("the export holds no key-00000004 to edit")
			}
			h, events, _ = auditlog.ReadExport(bytes.NewReader(edited))
			if v, err := auditlog.Verify(auditlog.Input{Key: cp.Key.Verifier, Checkpoints: [][]byte{[]byte(h.Checkpoint)}, Prefix: h.Prefix, Events: events}); err != nil || v.OK() {
				t.Fatalf("the export from %d, one event edited, verified (%v)", from, err)
			}
		}
		return nil
	})
}

func errOf[T any](_ T, err error) error { return err }

func testListing(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	bob := Caller
	bob.Principal = "bob"
	var ids []string
	mustID := func(r *pipeline.Result) {
		t.Helper()
		if r.AuditID == "" {
			t.Fatalf("no event: %s", r.ErrorJSON())
		}
		ids = append(ids, r.AuditID)
	}
	mustID(e.Call(Caller, "create_project", projectArgs("key-00000001", "alpha")))
	e.Advance(time.Minute)
	mustID(e.Call(bob, "create_project", projectArgs("key-00000002", "beta")))
	e.Advance(time.Minute)
	mustID(e.Call(Caller, "test_fail", testArgs("key-00000003", "gamma", "refusal")))
	e.Advance(time.Minute)
	mustID(e.Call(bob, "test_panic", testArgs("key-00000004", "delta", "")))
	e.Advance(time.Minute)
	mustID(e.Call(Caller, "create_project", projectArgs("key-00000005", "epsilon")))
	all := e.Events()
	target := all[1].Targets[0].ID
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		log := tx.Audit()
		seqs := func(f auditlog.Filter) []uint64 {
			t.Helper()
			evs, next, err := auditlog.List(log, f, 0, 100)
			if err != nil || next != 0 {
				t.Fatalf("List(%+v) = next %d, %v", f, next, err)
			}
			var out []uint64
			for _, ev := range evs {
				out = append(out, ev.Seq)
			}
			return out
		}
		for _, tt := range []struct {
			name string
			f    auditlog.Filter
			want []uint64
		}{
			{"all", auditlog.Filter{}, []uint64{1, 2, 3, 4, 5}},
			{"tool", auditlog.Filter{Tool: "create_project"}, []uint64{1, 2, 5}},
			{"principal", auditlog.Filter{Principal: "bob"}, []uint64{2, 4}},
			{"outcome", auditlog.Filter{Outcome: auditlog.Failed}, []uint64{3, 4}},
			{"code", auditlog.Filter{Code: "INTERNAL"}, []uint64{4}},
			{"key", auditlog.Filter{Key: "key-00000003"}, []uint64{3}},
			{"target", auditlog.Filter{Target: target}, []uint64{2}},
			{"request id", auditlog.Filter{RequestID: all[4].RequestID}, []uint64{5}},
			{"since, at an event", auditlog.Filter{Since: all[2].Time}, []uint64{3, 4, 5}},
			{"until, before an event", auditlog.Filter{Until: all[2].Time}, []uint64{1, 2}},
			{"a window", auditlog.Filter{Since: all[1].Time, Until: all[3].Time.Add(time.Nanosecond)}, []uint64{2, 3, 4}},
			{"combined", auditlog.Filter{Principal: "alice", Outcome: auditlog.OK}, []uint64{1, 5}},
			{"nothing", auditlog.Filter{Tool: "no_such_tool"}, nil},
		} {
			if got := seqs(tt.f); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("List by %s = %v, want %v", tt.name, got, tt.want)
			}
		}
		// Pages of two: a cursor after each full page, none after the last.
		var paged []uint64
		for after, pages := uint64(0), 0; ; pages++ {
			evs, next, err := auditlog.List(log, auditlog.Filter{}, after, 2)
			if err != nil || pages > 3 {
				t.Fatalf("page %d: %v", pages, err)
			}
			if len(evs) > 2 || next != 0 && len(evs) != 2 {
				t.Fatalf("a page of limit 2 holds %d events (next %d)", len(evs), next)
			}
			for _, ev := range evs {
				paged = append(paged, ev.Seq)
			}
			if next == 0 {
				break
			}
			if next != evs[len(evs)-1].Seq {
				t.Fatalf("the cursor %d is not the page's last event %d", next, evs[len(evs)-1].Seq)
			}
			after = next
		}
		if !reflect.DeepEqual(paged, []uint64{1, 2, 3, 4, 5}) {
			t.Errorf("the pages hold %v", paged)
		}
		if size, err := log.Size(); err != nil || size != 5 {
			t.Errorf("Size = %d, %v", size, err)
		}
		for i, id := range ids {
			byID, err := auditlog.ByID(log, id)
			bySeq, err2 := auditlog.Get(log, uint64(i+1))
			if err != nil || err2 != nil || !reflect.DeepEqual(byID, all[i]) || !reflect.DeepEqual(bySeq, all[i]) {
				t.Errorf("event %d by id and by seq: %v, %v", i+1, err, err2)
			}
		}
		for name, err := range map[string]error{
			"Get(0)":               errOf(auditlog.Get(log, 0)),
			"Get past the log":     errOf(auditlog.Get(log, 6)),
			"Get(1<<63)":           errOf(auditlog.Get(log, 1<<63)),
			"ByID of no event":     errOf(auditlog.ByID(log, "01KZZZZZZZZZZZZZZZZZZZZZZZ")),
			"ByID of no ULID":      errOf(auditlog.ByID(log, "not-an-id")),
			"ByID of \"\"":         errOf(auditlog.ByID(log, "")),
			"ByID of a cut-off id": errOf(auditlog.ByID(log, ids[0][:25])),
			"LatestCheckpoint":     errOf3(log.LatestCheckpoint()),
			"Leaf past the log":    errOf(log.Leaf(6)),
		} {
			if !errors.Is(err, auditlog.ErrNotFound) {
				t.Errorf("%s: %v, want ErrNotFound", name, err)
			}
		}
		// All stops at its fn's first error, and returns it.
		stop := errors.New("stop")
		var seen []uint64
		err := auditlog.All(log, func(ev *auditlog.Event) error {
			seen = append(seen, ev.Seq)
			if ev.Seq == 2 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || !reflect.DeepEqual(seen, []uint64{1, 2}) {
			t.Errorf("All stopping at 2: %v after %v", err, seen)
		}
		// Leaves from the middle, the leaf checks as the store keeps them.
		var from []uint64
		log.Leaves(4)(func(seq uint64, c, check []byte) bool {
			from = append(from, seq)
			if h := tlog.RecordHash(c); check != nil && !bytes.HasPrefix(h[:], check) {
				t.Errorf("event %d's leaf check is not its leaf hash's start", seq)
			}
			return true
		})
		if !reflect.DeepEqual(from, []uint64{4, 5}) {
			t.Errorf("Leaves(4) streamed %v", from)
		}
		return nil
	})
}

func errOf3[A, B any](_ A, _ B, err error) error { return err }

func testEventFormat(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	cp := checkpointer(t, e)
	unknown := event(e.Now(), "key-unknown-1")
	unknown.Tool, unknown.Outcome, unknown.Code, unknown.Status = "memory_create_entities", auditlog.Unknown, "OUTCOME_UNKNOWN", 502
	unknown.Targets = []auditlog.Target{{Kind: "entity", ID: "alpha", Revision: 0}}
	unknown.Upstream = &auditlog.Upstream{Name: "memory", Tool: "create_entities", Attempt: 2, End: "timeout", DurationMS: 30000.25,
		AnswerDigest: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
	var events []*auditlog.Event
	e.Update(func(tx pipeline.Tx[handlers.Store]) error {
		events = nil
		for _, ev := range []*auditlog.Event{event(e.Now(), "key-ok-1"), unknown} {
			if err := tx.Audit().Append(ev); err != nil {
				return err
			}
			events = append(events, ev)
		}
		return nil
	})
	e.Advance(time.Hour)
	resolves := event(e.Now(), "key-resolve-1")
	resolves.Resolves = &auditlog.Resolution{Event: unknown.ID, Principal: unknown.Principal, Key: unknown.IdempotencyKey, Finding: "applied"}
	e.Update(func(tx pipeline.Tx[handlers.Store]) error { return tx.Audit().Append(resolves) })
	events = append(events, resolves)
	e.Numbered(events...)
	mustSign(t, cp)

	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		log := tx.Audit()
		for _, want := range events {
			if want.Format != auditlog.Format {
				t.Errorf("event %d: Append left format %d, want %d", want.Seq, want.Format, auditlog.Format)
			}
			c, _ := want.Canonical()
			leaf, err := log.Leaf(want.Seq)
			if err != nil {
				return err
			}
			if !bytes.Equal(leaf, c) || !bytes.Contains(leaf, []byte(`"format":3,`)) {
				t.Errorf("event %d is stored as\n%s\nwant\n%s", want.Seq, leaf, c)
			}
			bySeq, err := auditlog.Get(log, want.Seq)
			if err != nil {
				return err
			}
			byID, err := auditlog.ByID(log, want.ID)
			if err != nil {
				return err
			}
			if !reflect.DeepEqual(bySeq, want) || !reflect.DeepEqual(byID, want) {
				t.Errorf("event %d comes back as %+v (by id %+v), want %+v", want.Seq, bySeq, byID, want)
			}
		}
		got, _, err := auditlog.List(log, auditlog.Filter{Outcome: auditlog.Unknown}, 0, 10)
		if err != nil {
			return err
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0], unknown) {
			t.Errorf("List of outcome unknown = %+v, want the one unknown event", got)
		}
		return nil
	})
	if v := verify(t, e, cp.Key); !v.OK() || v.Events != 3 || v.Checkpoints != 1 {
		t.Errorf("verify: %d events, %d checkpoints, problems %+v", v.Events, v.Checkpoints, v.Problems)
	}
}
