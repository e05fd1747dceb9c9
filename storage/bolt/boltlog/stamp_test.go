package boltlog

import (
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
)

// Ensure stampOf reads the id and time of an event's canonical JSON,
// wherever they stand, and refuses what is no event's.
func TestStampOf(t *testing.T) {
	when := time.Date(2026, 11, 30, 7, 39, 55, 97061795, time.UTC)
	e := &auditlog.Event{Seq: 7, ID: "01M8NPASASEMEBB87TEKZ28D4Y", Time: when, Principal: "p", Tool: "t", Outcome: auditlog.OK,
		Targets: []auditlog.Target{{Kind: "project", ID: "01M8NPASASEMEBB87TE8D6P503", Revision: 1}}}
	c, err := e.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, in string
		id       string
		time     time.Time
		wantErr  bool
	}{
		{"a canonical event", string(c), e.ID, when, false},
		{"time first", `{"time":"2026-01-02T03:04:05Z","x":[1,{"id":"no"}],"id":"A"}`, "A", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), false},
		{"no time", `{"id":"A"}`, "", time.Time{}, true},
		{"no id", `{"time":"2026-01-02T03:04:05Z"}`, "", time.Time{}, true},
		{"an id that is a number", `{"id":1,"time":"2026-01-02T03:04:05Z"}`, "", time.Time{}, true},
		{"a time that is no time", `{"id":"A","time":"yesterday"}`, "", time.Time{}, true},
		{"an array", `[]`, "", time.Time{}, true},
		{"empty", ``, "", time.Time{}, true},
		{"cut before its time", string(c[:strings.Index(string(c), `"time"`)]), "", time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, got, err := stampOf([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			if err == nil && (id != tt.id || !got.Equal(tt.time)) {
				t.Errorf("got %q at %v, want %q at %v", id, got, tt.id, tt.time)
			}
		})
	}
}

// FuzzStampOf holds stampOf to the event it reads: on any bytes it returns
// or fails without panicking, and on an event's canonical form it returns
// the event's id and time.
func FuzzStampOf(f *testing.F) {
	f.Add("01M8NPASASEMEBB87TEKZ28D4Y", int64(1795000000123456789), "k", []byte(`{"id":"A","time":"2026-01-02T03:04:05Z"}`))
	f.Fuzz(func(t *testing.T, id string, ns int64, key string, raw []byte) {
		stampOf(raw)
		e := &auditlog.Event{ID: id, Time: time.Unix(0, ns).UTC(), IdempotencyKey: key}
		c, err := e.Canonical()
		if err != nil {
			return // not an event JSON can hold (invalid UTF-8, a year past 9999)
		}
		gotID, gotTime, err := stampOf(c)
		if err != nil {
			t.Fatalf("stampOf(%s): %v", c, err)
		}
		if want, _ := auditlog.DecodeEvent(c); gotID != want.ID || !gotTime.Equal(want.Time) {
			t.Fatalf("stampOf(%s) = %q, %v; decode reads %q, %v", c, gotID, gotTime, want.ID, want.Time)
		}
	})
}

// BenchmarkStampOf reads the last event's id and time as Append does,
// against decoding the whole event as it did before.
func BenchmarkStampOf(b *testing.B) {
	e := &auditlog.Event{Seq: 7, ID: "01M8NPASASEMEBB87TEKZ28D4Y", Time: time.Now().UTC(), RequestID: "01M8NPASARA36D4C00D73G1Q97",
		Principal: "bench", Transport: "go", Tool: "create_project", IdempotencyKey: "bench-fd382ffe-0003-000000000",
		Digest: strings.Repeat("0f", 32), Outcome: auditlog.OK, DurationMS: 0.289,
		Targets: []auditlog.Target{{Kind: "project", ID: "01M8NPASASEMEBB87TE8D6P503", Revision: 1}}}
	c, err := e.Canonical()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("stamp", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, _, err := stampOf(c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := auditlog.DecodeEvent(c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
