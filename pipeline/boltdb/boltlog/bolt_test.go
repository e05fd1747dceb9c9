package boltlog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/pipeline/boltdb/boltlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

var update = flag.Bool("update", false, "rewrite golden files")

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)

// MustOpen opens a bbolt file in a temporary directory, with the audit
// buckets created.
func MustOpen(t testing.TB) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error { return boltlog.Init(kv.Wrap(tx)) }); err != nil {
		t.Fatal(err)
	}
	return db
}

// MustAppend appends events in one committed transaction.
func MustAppend(t testing.TB, db *bolt.DB, evs ...*auditlog.Event) {
	t.Helper()
	err := db.Update(func(tx *bolt.Tx) error {
		for _, e := range evs {
			if err := boltlog.Bind(kv.Wrap(tx)).Append(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// MustView runs fn in a read-only transaction.
func MustView(t testing.TB, db *bolt.DB, fn func(tx *bolt.Tx) error) {
	t.Helper()
	if err := db.View(fn); err != nil {
		t.Fatal(err)
	}
}

// stored returns every event's stored bytes, by sequence number.
func stored(t testing.TB, db *bolt.DB) map[uint64][]byte {
	t.Helper()
	m := map[uint64][]byte{}
	MustView(t, db, func(tx *bolt.Tx) error {
		return raw(kv.Wrap(tx), func(seq uint64, b []byte) error {
			m[seq] = bytes.Clone(b)
			return nil
		})
	})
	return m
}

// failedEvent is a refused write, with every member set. Its principal
// holds characters that encoding/json escapes and RFC 8785 does not.
func failedEvent() *auditlog.Event {
	return &auditlog.Event{
		Time:           t0,
		RequestID:      "01JGHJ0QZ5AAAAAAAAAAAAAAAA",
		Principal:      "ops<bot>&1",
		Transport:      "stdio",
		Tool:           "update_record",
		IdempotencyKey: "k-00000042",
		Digest:         "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Outcome:        auditlog.Failed,
		Code:           "REVISION_CONFLICT",
		Status:         409,
		Targets:        []auditlog.Target{{Kind: "record", ID: "01JGHJ0QZ5BBBBBBBBBBBBBBBB", Revision: 3}},
		DurationMS:     1.25,
	}
}

// okEvent is a successful write that touched nothing it names.
func okEvent(tm time.Time) *auditlog.Event {
	return &auditlog.Event{
		Time: tm, RequestID: "01JGHJ0QZ5CCCCCCCCCCCCCCCC", Principal: "local", Transport: "go",
		Tool: "create_project", IdempotencyKey: "k-00000001", Digest: "ab", Outcome: auditlog.OK,
	}
}

// Ensure appends get dense sequence numbers from 1, across transactions and
// within one, and distinct ULIDs that carry the event's time.
func TestAppend_SeqAndID(t *testing.T) {
	db := MustOpen(t)
	var evs []*auditlog.Event
	for i := range 7 {
		evs = append(evs, okEvent(t0.Add(time.Duration(i)*time.Second)))
	}
	MustAppend(t, db, evs[0])
	MustAppend(t, db, evs[1])
	MustAppend(t, db, evs[2:]...)

	ids := map[string]bool{}
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Errorf("event %d: seq = %d, want %d", i, e.Seq, i+1)
		}
		id, err := ulid.ParseStrict(e.ID)
		if err != nil {
			t.Fatalf("event %d: id %q is not a ULID: %v", i, e.ID, err)
		}
		if got := ulid.Time(id.Time()); !got.Equal(e.Time.Truncate(time.Millisecond)) {
			t.Errorf("event %d: ULID time = %v, want the event's %v", i, got, e.Time)
		}
		ids[e.ID] = true
	}
	if len(ids) != len(evs) {
		t.Errorf("%d distinct ids for %d events", len(ids), len(evs))
	}
	if got := slices.Sorted(maps.Keys(stored(t, db))); !reflect.DeepEqual(got, []uint64{1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("stored sequence numbers = %v, want 1…7", got)
	}
}

// Ensure an append in a transaction that rolls back leaves no event, and
// the next committed append still gets sequence number 1.
func TestAppend_RolledBack(t *testing.T) {
	db := MustOpen(t)
	failed := errors.New("the write failed")
	lost := okEvent(t0)
	err := db.Update(func(tx *bolt.Tx) error {
		if err := boltlog.Bind(kv.Wrap(tx)).Append(lost); err != nil {
			return err
		}
		if err := boltlog.Bind(kv.Wrap(tx)).Append(okEvent(t0)); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("Update: err = %v, want the fn's error", err)
	}
	if got := stored(t, db); len(got) != 0 {
		t.Fatalf("events after rollback = %d, want 0", len(got))
	}
	MustView(t, db, func(tx *bolt.Tx) error {
		if _, err := auditlog.ByID(boltlog.Bind(kv.Wrap(tx)), lost.ID); !errors.Is(err, auditlog.ErrNotFound) {
			t.Errorf("ByID of a rolled-back event: err = %v, want ErrNotFound", err)
		}
		return nil
	})

	first, second := okEvent(t0), okEvent(t0)
	MustAppend(t, db, first)
	MustAppend(t, db, second)
	if first.Seq != 1 || second.Seq != 2 {
		t.Errorf("seqs after a rollback = %d, %d, want 1, 2", first.Seq, second.Seq)
	}
}

// Ensure the stored bytes are the RFC 8785 form of the event (members
// sorted, no whitespace), with exactly the members of docs/DESIGN.md section 7:
// code and status on failures only, targets always.
func TestAppend_StoredCanonical(t *testing.T) {
	all := []string{"code", "digest", "duration_ms", "id", "idempotency_key", "outcome",
		"principal", "request_id", "seq", "status", "targets", "time", "tool", "transport"}
	db := MustOpen(t)
	MustAppend(t, db, failedEvent(), okEvent(t0))
	got := stored(t, db)
	for seq, want := range map[uint64][]string{
		1: all,
		2: slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == "code" || s == "status" }),
	} {
		b := got[seq]
		canon, err := digest.Canonical(b)
		if err != nil || !bytes.Equal(b, canon) {
			t.Errorf("event %d is not canonical:\nstored    %s\ncanonical %s (err %v)", seq, b, canon, err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, b); err != nil || !bytes.Equal(compact.Bytes(), b) {
			t.Errorf("event %d holds whitespace: %s", seq, b)
		}
		if names := memberNames(t, b); !reflect.DeepEqual(names, want) {
			t.Errorf("event %d members = %v, want (in this order) %v", seq, names, want)
		}
	}
	if !bytes.Contains(got[2], []byte(`"targets":[]`)) {
		t.Errorf("event without targets: %s, want \"targets\":[]", got[2])
	}
}

// memberNames returns the top-level member names of a JSON object in the
// order they appear.
func memberNames(t testing.TB, b []byte) []string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	var names []string
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tok.(string))
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// Ensure an event's stored bytes are exactly those of testdata/event.json
// (the random part of its id zeroed), and that they never change: not when
// more events follow, not across a reopen, not through a decode.
func TestAppend_Golden(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return boltlog.Init(kv.Wrap(tx)) }); err != nil {
		t.Fatal(err)
	}
	e := failedEvent()
	MustAppend(t, db, e)
	first := stored(t, db)[1]

	// The id's last 16 characters are random; its first 10 are the time.
	got := bytes.Replace(first, []byte(`"id":"`+e.ID+`"`), []byte(`"id":"`+e.ID[:10]+`0000000000000000"`), 1)
	golden := filepath.Join("testdata", "event.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("stored event:\n%s\nwant (%s):\n%s", got, golden, want)
	}

	MustAppend(t, db, failedEvent(), okEvent(t0))
	db.Close()
	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if again := stored(t, db)[1]; !bytes.Equal(again, first) {
		t.Errorf("stored bytes changed:\nbefore %s\nafter  %s", first, again)
	}
	// A verifier recomputes the bytes from the decoded event.
	MustView(t, db, func(tx *bolt.Tx) error {
		e, err := auditlog.Get(boltlog.Bind(kv.Wrap(tx)), 1)
		if err != nil {
			return err
		}
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if b, err = digest.Canonical(b); err != nil {
			return err
		}
		if !bytes.Equal(b, first) {
			t.Errorf("decoded and re-encoded:\n%s\nstored:\n%s", b, first)
		}
		return nil
	})
}

// Ensure every reader returns the events as appended, in sequence order,
// and ErrNotFound for what does not exist.
func TestReaders(t *testing.T) {
	db := MustOpen(t)
	evs := []*auditlog.Event{failedEvent(), okEvent(t0.Add(time.Second)), okEvent(t0.Add(2 * time.Second))}
	MustAppend(t, db, evs[0])
	MustAppend(t, db, evs[1:]...)
	stopped := errors.New("stop")

	MustView(t, db, func(tx *bolt.Tx) error {
		for _, want := range evs {
			if got, err := auditlog.Get(boltlog.Bind(kv.Wrap(tx)), want.Seq); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("Get(%d) = %+v, %v, want %+v", want.Seq, got, err, want)
			}
			if got, err := auditlog.ByID(boltlog.Bind(kv.Wrap(tx)), want.ID); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("ByID(%s) = %+v, %v, want %+v", want.ID, got, err, want)
			}
		}
		for _, seq := range []uint64{0, 4, 1 << 63} {
			if _, err := auditlog.Get(boltlog.Bind(kv.Wrap(tx)), seq); !errors.Is(err, auditlog.ErrNotFound) {
				t.Errorf("Get(%d): err = %v, want ErrNotFound", seq, err)
			}
		}
		for _, id := range []string{"01ARZ3NDEKTSV4RRFFQ69G5FAV", "", evs[0].ID[:25]} {
			if _, err := auditlog.ByID(boltlog.Bind(kv.Wrap(tx)), id); !errors.Is(err, auditlog.ErrNotFound) {
				t.Errorf("ByID(%q): err = %v, want ErrNotFound", id, err)
			}
		}

		var got []*auditlog.Event
		if err := auditlog.All(boltlog.Bind(kv.Wrap(tx)), func(e *auditlog.Event) error { got = append(got, e); return nil }); err != nil {
			return err
		}
		if !reflect.DeepEqual(got, evs) {
			t.Errorf("ForEach gave %+v, want %+v", got, evs)
		}
		got = nil
		err := auditlog.All(boltlog.Bind(kv.Wrap(tx)), func(e *auditlog.Event) error {
			got = append(got, e)
			if e.Seq == 2 {
				return stopped
			}
			return nil
		})
		if !errors.Is(err, stopped) || len(got) != 2 {
			t.Errorf("ForEach stopping at 2: err = %v after %d events, want the fn's error after 2", err, len(got))
		}

		var seqs []uint64
		err = raw(kv.Wrap(tx), func(seq uint64, b []byte) error {
			seqs = append(seqs, seq)
			var e auditlog.Event
			if err := json.Unmarshal(b, &e); err != nil || e.Seq != seq {
				t.Errorf("Raw(%d) bytes hold seq %d (err %v)", seq, e.Seq, err)
			}
			if seq == 1 {
				return stopped
			}
			return nil
		})
		if !errors.Is(err, stopped) || !reflect.DeepEqual(seqs, []uint64{1}) {
			t.Errorf("Raw stopping at 1: err = %v after %v, want the fn's error after [1]", err, seqs)
		}
		return nil
	})
}

// raw calls fn with each event's sequence number and canonical bytes, in
// sequence order, stopping at fn's first error.
func raw(tx *kv.Tx, fn func(seq uint64, canonical []byte) error) error {
	var failed error
	err := boltlog.Bind(tx).Leaves(1)(func(seq uint64, c, _ []byte) bool {
		failed = fn(seq, c)
		return failed == nil
	})
	return errors.Join(err, failed)
}
