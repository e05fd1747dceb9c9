package bolt_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/boltkeys"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// plant writes events and records as given, bypassing the pipeline, and
// returns the events with their ids.
func plant(t testing.TB, db *bolt.DB, events []*auditlog.Event, records func(ev []*auditlog.Event) []*idempotency.Record) {
	t.Helper()
	err := db.Update(ctx, func(tx *kv.Tx) error {
		for _, e := range events {
			at := e.Time
			if err := boltlog.Bind(tx).Append(e); err != nil {
				return err
			}
			if !e.Time.Equal(at) {
				// Append keeps times in order; a clock going back can only
				// be planted by rewriting the stored event.
				b := tx.Bucket([]byte("audit_events"))
				k := binary.BigEndian.AppendUint64(nil, e.Seq)
				v := bytes.Replace(b.Get(k), []byte(e.Time.Format(time.RFC3339Nano)), []byte(at.Format(time.RFC3339Nano)), 1)
				if err := b.Put(k, v); err != nil {
					return err
				}
				e.Time = at
			}
		}
		for _, r := range records(events) {
			if err := (boltkeys.Store{}).Put(tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func event(key string, at time.Time) *auditlog.Event {
	return &auditlog.Event{Time: at, Principal: "p", Tool: "t", IdempotencyKey: key, Digest: "d", Outcome: auditlog.OK}
}

func record(key string, e *auditlog.Event, created, expires time.Time) *idempotency.Record {
	return &idempotency.Record{Principal: "p", Key: key, Digest: "d", State: idempotency.Completed, AuditID: e.ID, CreatedAt: created, ExpiresAt: expires}
}

// invariants runs pipeline.Check, the invariants every backend keeps, on
// the database.
func invariants(t testing.TB, db *bolt.DB) error {
	t.Helper()
	var problems error
	err := bolt.NewStorage(db, func(*kv.Tx) struct{} { return struct{}{} }).View(ctx, func(tx pipeline.Tx[struct{}]) error {
		problems = pipeline.Check(tx, time.Now())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// Ensure pipeline.Check names, on a bbolt store planted by hand, each
// broken promise of the audit log and the keys:
// an event dated before the one it follows, a live record with no event
// since its creation, with two, or with one that is not its own; and
// that it leaves alone a record whose event is dated exactly at its
// creation, and an expired record whatever events its key has.
func TestCheck_EventsAndKeys(t *testing.T) {
	t0 := time.Now().Add(-time.Hour).UTC()
	later := time.Now().Add(time.Hour)
	tests := []struct {
		name    string
		events  []*auditlog.Event
		records func(ev []*auditlog.Event) []*idempotency.Record
		want    string // "" for none
	}{
		{"one event at the record's creation", []*auditlog.Event{event("k-1", t0)},
			func(ev []*auditlog.Event) []*idempotency.Record {
				return []*idempotency.Record{record("k-1", ev[0], t0, later)}
			}, ""},
		{"time going back", []*auditlog.Event{event("k-1", t0), event("k-2", t0.Add(-time.Nanosecond))},
			func([]*auditlog.Event) []*idempotency.Record { return nil },
			"audit event 2 is dated " + t0.Add(-time.Nanosecond).Format(time.RFC3339Nano) + ", before event 1"},
		{"no event since the record's creation", []*auditlog.Event{event("k-1", t0)},
			func(ev []*auditlog.Event) []*idempotency.Record {
				return []*idempotency.Record{record("k-1", ev[0], t0.Add(time.Nanosecond), later)}
			}, "idempotency record p/k-1 has no audit event since it was created"},
		{"two events since the record's creation", []*auditlog.Event{event("k-1", t0), event("k-1", t0)},
			func(ev []*auditlog.Event) []*idempotency.Record {
				return []*idempotency.Record{record("k-1", ev[0], t0, later)}
			}, "idempotency record p/k-1 has 2 audit events since it was created, want one"},
		{"the event since creation is another's", []*auditlog.Event{event("k-1", t0), event("k-1", t0.Add(time.Second))},
			func(ev []*auditlog.Event) []*idempotency.Record {
				return []*idempotency.Record{record("k-1", ev[0], t0.Add(time.Second), later)}
			}, "the audit event since idempotency record p/k-1 was created is not the record's own"},
		{"an expired record", []*auditlog.Event{event("k-1", t0), event("k-1", t0)},
			func(ev []*auditlog.Event) []*idempotency.Record {
				return []*idempotency.Record{record("k-1", ev[0], t0, time.Now().Add(-time.Second))}
			}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := MustOpen(t, t.TempDir())
			plant(t, db, tt.events, tt.records)
			err := invariants(t, db)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check = %v, want no problem", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Check = %v, want %q", err, tt.want)
			case tt.want != "" && strings.Count(err.Error(), "\n") != 0:
				t.Fatalf("Check = %v, want that one problem only", err)
			}
		})
	}
}
