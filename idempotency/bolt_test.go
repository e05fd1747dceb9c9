package idempotency_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/idempotency"
)

var store idempotency.Bolt

// MustOpen opens a bbolt file in a temporary directory with the record
// bucket created. Commits are not fsynced: the tests do not crash.
func MustOpen(t testing.TB) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	MustUpdate(t, db, func(tx *bolt.Tx) error { return store.Init(tx) })
	return db
}

// MustUpdate runs fn in a committed read-write transaction.
func MustUpdate(t testing.TB, db *bolt.DB, fn func(*bolt.Tx) error) {
	t.Helper()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// MustPut stores records, each in its own transaction.
func MustPut(t testing.TB, db *bolt.DB, rs ...*idempotency.Record) {
	t.Helper()
	MustUpdate(t, db, func(tx *bolt.Tx) error {
		for _, r := range rs {
			if err := store.Put(tx, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// MustGet returns the stored record of principal's key, or nil.
func MustGet(t testing.TB, db *bolt.DB, principal, key string) *idempotency.Record {
	t.Helper()
	var r *idempotency.Record
	err := db.View(func(tx *bolt.Tx) error {
		var err error
		r, err = store.Get(tx, principal, key)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// storedKeys returns every storage key in the bucket, in order.
func storedKeys(t testing.TB, db *bolt.DB) [][]byte {
	t.Helper()
	var ks [][]byte
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("idempotency")).ForEach(func(k, _ []byte) error {
			ks = append(ks, bytes.Clone(k))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func record(principal, key, digest string, expires time.Time) *idempotency.Record {
	return &idempotency.Record{
		Principal: principal, Key: key, Tool: "create_project", Digest: digest,
		State: idempotency.Completed, Result: []byte(`{"project":{}}`), AuditID: "01JAUDIT",
		CreatedAt: expires.Add(-24 * time.Hour), ExpiresAt: expires,
	}
}

// Ensure a record comes back as it was stored, its result byte for byte
// (a replay must be byte-identical), and that an absent key is nil.
func TestBolt_PutGet(t *testing.T) {
	db := MustOpen(t)
	completed := record("agent", "k-00000001", "d1", now.Add(time.Hour))
	completed.Result = []byte("{\"b\": 1,  \"a\":[ ],\n\"é\":\"\\u00e9\"}") // not canonical: kept as is
	failed := &idempotency.Record{
		Principal: "agent", Key: "k-00000002", Tool: "delete_record", Digest: "d2",
		State: idempotency.Failed, Code: "REVISION_CONFLICT", AuditID: "01JAUDIT2",
		CreatedAt: now, ExpiresAt: now.Add(time.Hour),
	}
	expired := record("agent", "k-00000003", "d3", now.Add(-time.Hour))
	MustPut(t, db, completed, failed, expired)

	for _, want := range []*idempotency.Record{completed, failed, expired} {
		got := MustGet(t, db, want.Principal, want.Key)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Get(%s) = %+v, want %+v", want.Key, got, want)
		}
	}
	if got := MustGet(t, db, "agent", "k-00000004"); got != nil {
		t.Errorf("Get of an unused key = %+v, want nil", got)
	}
}

// Ensure Put over an expired record of the same key replaces it.
func TestBolt_PutReplaces(t *testing.T) {
	db := MustOpen(t)
	MustPut(t, db, record("agent", "k-00000001", "old", now.Add(-time.Hour)))
	MustPut(t, db, record("agent", "k-00000001", "new", now.Add(time.Hour)))
	if got := MustGet(t, db, "agent", "k-00000001"); got.Digest != "new" {
		t.Errorf("digest after replace = %q, want new", got.Digest)
	}
	if n := len(storedKeys(t, db)); n != 1 {
		t.Errorf("records stored = %d, want 1", n)
	}
}

// Ensure keys are scoped by principal: principal and key are joined with a
// 0x00 byte, so "a"+"key" and "ak"+"ey" are two records, and one principal
// never sees another's.
func TestBolt_KeysScopedByPrincipal(t *testing.T) {
	db := MustOpen(t)
	exp := now.Add(time.Hour)
	MustPut(t, db, record("a", "key", "of a", exp), record("ak", "ey", "of ak", exp))

	if got := MustGet(t, db, "a", "key"); got == nil || got.Digest != "of a" {
		t.Errorf(`Get("a", "key") = %+v, want the record of a`, got)
	}
	if got := MustGet(t, db, "ak", "ey"); got == nil || got.Digest != "of ak" {
		t.Errorf(`Get("ak", "ey") = %+v, want the record of ak`, got)
	}
	for _, pk := range [][2]string{{"b", "key"}, {"", "akey"}, {"akey", ""}, {"a", "ke"}} {
		if got := MustGet(t, db, pk[0], pk[1]); got != nil {
			t.Errorf("Get(%q, %q) = %+v, want nil", pk[0], pk[1], got)
		}
	}
	want := [][]byte{[]byte("a\x00key"), []byte("ak\x00ey")}
	if got := storedKeys(t, db); !reflect.DeepEqual(got, want) {
		t.Errorf("storage keys = %q, want %q", got, want)
	}
}

// Ensure Collect works in bounded steps: each step examines at most limit
// records, resuming after the previous step's key, deletes exactly the
// expired ones among them, and answers nil once it reaches the end; every
// expired record goes and every live one stays.
func TestBolt_Collect(t *testing.T) {
	const n = 2500
	for _, limit := range []int{1000, 500, 97, n, n + 1} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			t.Parallel()
			db := MustOpen(t)
			var rs []*idempotency.Record
			expired := map[string]bool{} // by storage key
			for i := range n {
				// Several principals, so that one principal's keys are not
				// contiguous in insertion order; every third record expired,
				// one exactly at now (expired), one a nanosecond after (live).
				exp := now.Add(time.Duration(i%3-1) * time.Hour)
				switch i {
				case 10:
					exp = now
				case 11:
					exp = now.Add(time.Nanosecond)
				}
				r := record(fmt.Sprintf("p%d", i%5), fmt.Sprintf("key-%06d", i*7919%n), "d", exp)
				rs = append(rs, r)
				expired[r.Principal+"\x00"+r.Key] = r.Expired(now)
			}
			MustPut(t, db, rs...)
			keys := storedKeys(t, db)
			if len(keys) != n {
				t.Fatalf("stored %d records, want %d", len(keys), n)
			}

			var from []byte
			for step := 0; ; step++ {
				window := keys[min(step*limit, n):min((step+1)*limit, n)]
				var wantDeleted int
				for _, k := range window {
					if expired[string(k)] {
						wantDeleted++
					}
				}
				var next []byte
				var deleted int
				MustUpdate(t, db, func(tx *bolt.Tx) error {
					var err error
					next, deleted, err = store.Collect(tx, now, from, limit)
					return err
				})
				if deleted != wantDeleted {
					t.Fatalf("step %d deleted %d, want %d (the expired among its %d records)", step, deleted, wantDeleted, len(window))
				}
				// What is left: every live record, and the expired ones
				// after this step's window.
				left := map[string]bool{}
				for _, k := range storedKeys(t, db) {
					left[string(k)] = true
				}
				for i, k := range keys {
					if want := !expired[string(k)] || i >= (step+1)*limit; left[string(k)] != want {
						t.Fatalf("after step %d record %q present = %v, want %v", step, k, !want, want)
					}
				}
				if (step+1)*limit >= n {
					if next != nil {
						t.Fatalf("step %d reached the end but next = %q, want nil", step, next)
					}
					break
				}
				if want := window[len(window)-1]; !bytes.Equal(next, want) {
					t.Fatalf("step %d next = %q, want its last key %q", step, next, want)
				}
				from = next
			}

			// A new round finds nothing more to delete.
			MustUpdate(t, db, func(tx *bolt.Tx) error {
				next, deleted, err := store.Collect(tx, now, nil, n+1)
				if next != nil || deleted != 0 {
					t.Errorf("second round: next = %q, deleted = %d, want nil, 0", next, deleted)
				}
				return err
			})
			for _, r := range rs {
				if got := MustGet(t, db, r.Principal, r.Key); (got == nil) != r.Expired(now) {
					t.Errorf("record %s/%s (expires %v) present = %v", r.Principal, r.Key, r.ExpiresAt.Sub(now), got != nil)
				}
			}
		})
	}
}

// Ensure a step resuming after the last key answers that it reached the end.
func TestBolt_CollectFromPastEnd(t *testing.T) {
	db := MustOpen(t)
	MustPut(t, db, record("a", "k-00000001", "d", now.Add(-time.Hour)))
	MustUpdate(t, db, func(tx *bolt.Tx) error {
		next, deleted, err := store.Collect(tx, now, []byte("zz\x00"), 10)
		if next != nil || deleted != 0 {
			t.Errorf("Collect past the end: next = %q, deleted = %d, want nil, 0", next, deleted)
		}
		return err
	})
	if MustGet(t, db, "a", "k-00000001") == nil {
		t.Error("a record before from was collected")
	}
}

// Ensure a transaction of another backend is refused, not misused.
func TestBolt_ErrTx(t *testing.T) {
	notTx := struct{}{}
	if err := store.Init(notTx); !errors.Is(err, idempotency.ErrTx) {
		t.Errorf("Init: err = %v, want ErrTx", err)
	}
	if _, err := store.Get(notTx, "p", "k"); !errors.Is(err, idempotency.ErrTx) {
		t.Errorf("Get: err = %v, want ErrTx", err)
	}
	if err := store.Put(notTx, record("p", "k", "d", now)); !errors.Is(err, idempotency.ErrTx) {
		t.Errorf("Put: err = %v, want ErrTx", err)
	}
	if _, _, err := store.Collect(notTx, now, nil, 10); !errors.Is(err, idempotency.ErrTx) {
		t.Errorf("Collect: err = %v, want ErrTx", err)
	}
}
