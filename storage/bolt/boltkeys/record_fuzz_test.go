package boltkeys

import (
	"reflect"
	"testing"
	"time"

	"github.com/writerd/writerd/idempotency"
)

// FuzzUnmarshal holds the stored form of a record to two promises: any
// bytes decode or fail without a panic, and a record's stored form
// decodes to the record, whatever its strings and result hold.
func FuzzUnmarshal(f *testing.F) {
	r := &idempotency.Record{Principal: "agent", Key: "k-00000001", Tool: "create_project", Digest: "d", State: idempotency.Completed,
		Result: []byte(`{"project":{}}`), AuditID: "01JAUDIT", CreatedAt: time.Unix(1, 2).UTC(), ExpiresAt: time.Unix(3, 4).UTC()}
	stored, err := marshal(r)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(stored, "agent", "k", "", "REVISION_CONFLICT", int64(1795000000123456789), []byte(`{}`))
	f.Add([]byte{format1, 0xff}, "", "", "", "", int64(0), []byte(nil))
	pending := &idempotency.Record{Principal: "agent", Key: "k-00000002", Tool: "memory_create_entities", Digest: "d", State: idempotency.Pending,
		AuditID: "", CreatedAt: time.Unix(1, 2).UTC(), ExpiresAt: idempotency.Never, Owner: "p-1", Attempt: 2,
		LeaseUntil: time.Unix(5, 6).UTC(), UpstreamKey: "uk", Args: []byte(`{"entities":[]}`)}
	if stored, err = marshal(pending); err != nil {
		f.Fatal(err)
	}
	f.Add(stored, "agent", "k", "", "", int64(7), []byte(nil))
	f.Add([]byte{format2, 3, 0xff}, "", "", "", "", int64(0), []byte(nil))
	f.Fuzz(func(t *testing.T, raw []byte, principal, key, digest, code string, ns int64, result []byte) {
		if r, err := unmarshal(raw); err == nil {
			again, err := marshal(r)
			if err != nil {
				t.Fatalf("%q decodes to %+v, which does not encode: %v", raw, r, err)
			}
			if back, err := unmarshal(again); err != nil || !same(back, r) {
				t.Fatalf("%q decodes to %+v, whose stored form decodes to %+v, %v", raw, r, back, err)
			}
		}
		want := &idempotency.Record{Principal: principal, Key: key, Tool: "t", Digest: digest, State: idempotency.Failed, Code: code,
			Result: result, AuditID: "a", CreatedAt: time.Unix(0, ns).UTC(), ExpiresAt: time.Unix(0, ns).In(time.FixedZone("", 3600))}
		if len(want.Result) == 0 {
			want.Result = nil // stored as nothing, read back as nil
		}
		stored, err := marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := unmarshal(stored)
		if err != nil || !same(got, want) {
			t.Fatalf("%+v comes back as %+v, %v", want, got, err)
		}
		if p, k, err := owner(stored); err != nil || p != principal || k != key {
			t.Fatalf("owner = %q, %q, %v; want %q, %q", p, k, err, principal, key)
		}
		// Format 2: a write outside the store, unknown and unresolved.
		want = &idempotency.Record{Principal: principal, Key: key, Tool: "t", Digest: digest, State: idempotency.Unknown, Code: code,
			Result: result, AuditID: "a", CreatedAt: time.Unix(0, ns).UTC(), ExpiresAt: idempotency.Never,
			Owner: digest, Attempt: int(uint32(ns) >> 1), LeaseUntil: time.Unix(0, ns).UTC(), UpstreamKey: code, Args: result}
		if len(want.Args) == 0 {
			want.Args = nil
		}
		if len(want.Result) == 0 {
			want.Result = nil // the fuzzer hands a nil seed over as empty: stored as nothing, read back as nil
		}
		if stored, err = marshal(want); err != nil {
			t.Fatal(err)
		}
		if stored[0] != format2 {
			t.Fatalf("an unknown record is stored in format %d", stored[0])
		}
		got, err = unmarshal(stored)
		if err != nil || !same(got, want) {
			t.Fatalf("%+v comes back as %+v, %v", want, got, err)
		}
		if p, k, open, err := header(stored); err != nil || p != principal || k != key || !open {
			t.Fatalf("header = %q, %q, %v, %v; want %q, %q, true", p, k, open, err, principal, key)
		}
	})
}

// same reports whether two records are equal, each of their times as an
// instant with one zone offset (a decoded fixed zone is a Location of its
// own, so reflect.DeepEqual would tell two spellings of one time apart).
func same(a, b *idempotency.Record) bool {
	x, y := *a, *b
	at := func(r *idempotency.Record) []*time.Time {
		return []*time.Time{&r.CreatedAt, &r.ExpiresAt, &r.LeaseUntil, &r.ResolvedAt}
	}
	for i, t := range at(&x) {
		u := at(&y)[i]
		_, to := t.Zone()
		_, uo := u.Zone()
		if !t.Equal(*u) || to != uo {
			return false
		}
		*t, *u = time.Time{}, time.Time{}
	}
	return reflect.DeepEqual(x, y)
}
