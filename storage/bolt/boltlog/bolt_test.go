package boltlog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/digest"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/bolttest"
	"github.com/writerd/writerd/storage/bolt/kv"
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

// upstreamEvent is a write outside the store whose outcome is unknown.
func upstreamEvent() *auditlog.Event {
	e := failedEvent()
	e.Outcome, e.Code, e.Status, e.Tool = auditlog.Unknown, "OUTCOME_UNKNOWN", 502, "memory_create_entities"
	e.Upstream = &auditlog.Upstream{Name: "memory", Tool: "create_entities", Attempt: 1, End: "timeout", DurationMS: 30000}
	return e
}

// resolutionEvent is an operator's resolution of event 3.
func resolutionEvent() *auditlog.Event {
	e := okEvent(t0)
	e.Resolves = &auditlog.Resolution{Event: "01JGJFGR830000000000000000", Principal: "ops<bot>&1", Key: "k-00000042", Finding: "applied"}
	return e
}

// Ensure the stored bytes are the RFC 8785 form of the event (members
// sorted, no whitespace), with exactly the members of docs/DESIGN.md section 7:
// its format always, code and status on failures only, targets always,
// upstream on a write outside the store, resolves on a resolution.
func TestAppend_StoredCanonical(t *testing.T) {
	all := []string{"code", "digest", "duration_ms", "format", "id", "idempotency_key", "outcome",
		"principal", "request_id", "seq", "status", "targets", "time", "tool", "transport"}
	db := MustOpen(t)
	MustAppend(t, db, failedEvent(), okEvent(t0), upstreamEvent(), resolutionEvent())
	got := stored(t, db)
	for seq, want := range map[uint64][]string{
		1: all,
		2: slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == "code" || s == "status" }),
		3: append(slices.Clone(all), "upstream"),
		4: slices.Insert(slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == "code" || s == "status" }), 8, "resolves"),
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

// Ensure a log an earlier writerd wrote (events of format 1, without a
// format member) keeps those events' bytes when this one appends to it:
// bolttest.AppendEarlier stores the very bytes the earlier writerd did
// (testdata/event-format1.json, that writerd's golden event), the events
// appended after it carry format 2 and follow it, every event decodes,
// and the tree over the mixed log verifies from the stored bytes.
func TestAppend_AfterFormat1(t *testing.T) {
	db := MustOpen(t)
	var earlier [][]byte
	err := db.Update(func(tx *bolt.Tx) error {
		for _, e := range []*auditlog.Event{failedEvent(), okEvent(t0)} {
			earlier = append(earlier, bolttest.Tx{Tx: tx}.AppendEarlier(t, e))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "event-format1.json"))
	if err != nil {
		t.Fatal(err)
	}
	first := stored(t, db)[1]
	if id := first[bytes.Index(first, []byte(`"id":"`))+6:][:26]; !bytes.Equal(bytes.Replace(first, id, []byte(string(id[:10])+"0000000000000000"), 1), want) {
		t.Fatalf("the earlier event as stored:\n%s\nwant the earlier writerd's (testdata/event-format1.json):\n%s", first, want)
	}
	MustAppend(t, db, upstreamEvent(), okEvent(t0.Add(-time.Hour)))
	MustAppend(t, db, resolutionEvent())
	got := stored(t, db)
	if len(got) != 5 {
		t.Fatalf("%d events stored, want 5", len(got))
	}
	for i, b := range earlier {
		if !bytes.Equal(got[uint64(i+1)], b) {
			t.Errorf("event %d changed:\n%s\nwas\n%s", i+1, got[uint64(i+1)], b)
		}
		if bytes.Contains(b, []byte(`"format"`)) {
			t.Errorf("event %d of format 1 holds a format member: %s", i+1, b)
		}
	}
	MustView(t, db, func(tx *bolt.Tx) error {
		log := boltlog.Bind(kv.Wrap(tx))
		events, _, err := auditlog.List(log, auditlog.Filter{}, 0, 10)
		if err != nil {
			return err
		}
		for _, e := range events {
			wantFormat := auditlog.Format
			if e.Seq <= 2 {
				wantFormat = 0
			}
			c, _ := e.Canonical()
			switch {
			case e.Format != wantFormat:
				t.Errorf("event %d: format %d, want %d", e.Seq, e.Format, wantFormat)
			case !bytes.Equal(c, got[e.Seq]):
				t.Errorf("event %d decoded and encoded again:\n%s\nstored:\n%s", e.Seq, c, got[e.Seq])
			case e.Seq > 1 && e.ID <= events[e.Seq-2].ID:
				t.Errorf("event %d: id %s does not follow %s", e.Seq, e.ID, events[e.Seq-2].ID)
			}
		}
		if events[2].Upstream == nil || events[2].Upstream.Name != "memory" || events[4].Resolves == nil {
			t.Errorf("the upstream and resolves members did not come back: %+v, %+v", events[2], events[4])
		}
		v, err := auditlog.Verify(auditlog.Input{Events: log.Leaves(1)})
		if err != nil {
			return err
		}
		if !v.OK() || v.Events != 5 {
			t.Errorf("verify over the mixed log: %d events, problems %+v", v.Events, v.Problems)
		}
		root, err := auditlog.TreeHash(log, 5)
		if err != nil {
			return err
		}
		if root != v.Root {
			t.Errorf("the stored tree's root %x is not the root recomputed from the events, %x", root, v.Root)
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
