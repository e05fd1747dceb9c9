package boltkeys_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/storage/bolt/boltkeys"
	"github.com/writerd/writerd/storage/bolt/kv"
)

var store boltkeys.Store

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// MustOpen opens a bbolt file in a temporary directory with the record
// bucket created. Commits are not fsynced: the tests do not crash.
func MustOpen(t testing.TB) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	MustUpdate(t, db, func(tx *bolt.Tx) error { return store.Init(kv.Wrap(tx)) })
	t.Cleanup(func() { MustCheck(t, db) })
	return db
}

// MustCheck fails the test if the index and the records disagree.
func MustCheck(t testing.TB, db *bolt.DB) {
	t.Helper()
	if err := db.View(func(tx *bolt.Tx) error { return store.Check(kv.Wrap(tx)) }); err != nil {
		t.Errorf("Check: %v", err)
	}
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
			if err := store.Put(kv.Wrap(tx), r); err != nil {
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
		r, err = store.Get(kv.Wrap(tx), principal, key)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// storedKeys returns every key of the index, in order.
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

// The promises of the key store every backend keeps (records come back
// as stored, keys are per principal, collection's steps and edges) are
// the conformance suite's (storage/storetest); these tests hold bbolt's
// layout.

// Ensure the index joins principal and key with a 0x00 byte, so that "a"
// with "key" and "ak" with "ey" are two entries.
func TestBolt_IndexKeys(t *testing.T) {
	db := MustOpen(t)
	exp := now.Add(time.Hour)
	MustPut(t, db, record("a", "key", "of a", exp), record("ak", "ey", "of ak", exp))
	want := [][]byte{[]byte("a\x00key"), []byte("ak\x00ey")}
	if got := storedKeys(t, db); !reflect.DeepEqual(got, want) {
		t.Errorf("storage keys = %q, want %q", got, want)
	}
}

// expiries returns the expiry of each stored record, in storage order, as
// nanoseconds from now.
func expiries(t testing.TB, db *bolt.DB) []time.Duration {
	t.Helper()
	var out []time.Duration
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("idempotency_records")).ForEach(func(k, _ []byte) error {
			out = append(out, time.Unix(0, int64(binary.BigEndian.Uint64(k))).Sub(now))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Ensure records are stored in the order they expire, so that collection
// cuts the bucket from its start: after a collection the first record is
// live, and every record has its one index entry.
func TestBolt_RecordsInExpiryOrder(t *testing.T) {
	const n = 500
	db := MustOpen(t)
	var rs []*idempotency.Record
	live := 0
	for i := range n {
		r := record(fmt.Sprintf("p%d", i%5), fmt.Sprintf("key-%06d", i*7919%n), "d", now.Add(time.Duration(i%3-1)*time.Hour))
		rs = append(rs, r)
		if !r.Expired(now) {
			live++
		}
	}
	MustPut(t, db, rs...)
	if got := expiries(t, db); !slices.IsSorted(got) || len(got) != n {
		t.Fatalf("%d records, want %d in the order they expire", len(got), n)
	}
	MustUpdate(t, db, func(tx *bolt.Tx) error {
		_, _, err := store.Collect(kv.Wrap(tx), now, n)
		return err
	})
	if got := expiries(t, db); len(got) != live || got[0] <= 0 {
		t.Fatalf("%d records after collection, the first expiring at now%+v; want %d, all live", len(got), got[0], live)
	}
	if got := len(storedKeys(t, db)); got != live {
		t.Fatalf("%d index entries after collection, want %d", got, live)
	}
}

// Ensure a record that replaces an expired one of its key takes its place:
// one index entry, one record, at the new expiry.
func TestBolt_PutReplacesTheExpiredRecord(t *testing.T) {
	db := MustOpen(t)
	MustPut(t, db, record("agent", "k-00000001", "old", now.Add(-time.Hour)))
	MustPut(t, db, record("agent", "k-00000001", "new", now.Add(time.Hour)))
	if got := expiries(t, db); len(got) != 1 || got[0] != time.Hour {
		t.Fatalf("records expiring at now%+v, want one at the new expiry", got)
	}
	if got := len(storedKeys(t, db)); got != 1 {
		t.Fatalf("%d index entries, want 1", got)
	}
}

// Ensure Init converts a store of the earlier layout, JSON records under
// principal and key with an expiry index beside them, in both of its
// record forms: every record comes back as it was, the expiry index is
// gone, and collection finds the expired one.
func TestBolt_InitConvertsTheEarlierLayout(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	live, expired := record("a", "k-00000001", "d1", now.Add(time.Hour)), record("b", "k-00000002", "d2", now.Add(-time.Hour))
	live.Result = []byte("{\"b\": 1,  \"a\":[ ]}") // kept byte for byte
	head := *live
	head.Result = nil
	split, _ := json.Marshal(&head)
	split = append(append(split, '\n'), live.Result...) // the form with the result after a newline
	whole, _ := json.Marshal(expired)                   // the earliest form: the result in base64
	MustUpdate(t, db, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("idempotency"))
		if err != nil {
			return err
		}
		if err := b.Put([]byte("a\x00k-00000001"), split); err != nil {
			return err
		}
		if err := b.Put([]byte("b\x00k-00000002"), whole); err != nil {
			return err
		}
		x, err := tx.CreateBucket([]byte("idempotency_expiry"))
		if err != nil {
			return err
		}
		return x.Put(binary.BigEndian.AppendUint64(nil, uint64(live.ExpiresAt.UnixNano())), nil)
	})
	MustUpdate(t, db, func(tx *bolt.Tx) error { return store.Init(kv.Wrap(tx)) })
	MustCheck(t, db)
	for _, want := range []*idempotency.Record{live, expired} {
		if got := MustGet(t, db, want.Principal, want.Key); !reflect.DeepEqual(got, want) {
			t.Errorf("Get(%s) = %+v, want %+v", want.Key, got, want)
		}
	}
	MustUpdate(t, db, func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("idempotency_expiry")) != nil {
			t.Error("the expiry index of the earlier layout is still there")
		}
		n, more, err := store.Collect(kv.Wrap(tx), now, 10)
		if n != 1 || more {
			t.Errorf("Collect = %d, %v, want the one expired record", n, more)
		}
		return err
	})
	if got := MustGet(t, db, "a", "k-00000001"); !reflect.DeepEqual(got, live) {
		t.Errorf("the live record after collection: %+v", got)
	}
	MustUpdate(t, db, func(tx *bolt.Tx) error { return store.Init(kv.Wrap(tx)) }) // a second open changes nothing
	MustCheck(t, db)
}

// Ensure Check finds an index that disagrees with the records: a record
// without its entry, an entry without its record, an entry naming
// another record.
func TestBolt_CheckFindsADamagedIndex(t *testing.T) {
	tests := []struct {
		name   string
		damage func(index, records *bolt.Bucket) error
		want   string
	}{
		{"a record without its entry", func(index, _ *bolt.Bucket) error {
			return index.Delete([]byte("a\x00k-00000001"))
		}, "idempotency record a/k-00000001 is not the one its index entry names"},
		{"an entry without its record", func(index, records *bolt.Bucket) error {
			return records.Delete(index.Get([]byte("a\x00k-00000001")))
		}, "the idempotency index has 2 entries for 1 records"},
		{"an entry naming another record", func(index, _ *bolt.Bucket) error {
			return index.Put([]byte("a\x00k-00000001"), bytes.Clone(index.Get([]byte("b\x00k-00000002"))))
		}, "idempotency record a/k-00000001 is not the one its index entry names"},
		{"bytes that are no record", func(index, records *bolt.Bucket) error {
			return records.Put(bytes.Clone(index.Get([]byte("a\x00k-00000001"))), []byte(`{"principal":"a"}`))
		}, "not a stored record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := MustOpen(t)
			MustPut(t, db, record("a", "k-00000001", "d", now.Add(time.Hour)), record("b", "k-00000002", "d", now.Add(2*time.Hour)))
			MustUpdate(t, db, func(tx *bolt.Tx) error {
				return tt.damage(tx.Bucket([]byte("idempotency")), tx.Bucket([]byte("idempotency_records")))
			})
			err := db.View(func(tx *bolt.Tx) error { return store.Check(kv.Wrap(tx)) })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check = %v, want %q", err, tt.want)
			}
			MustUpdate(t, db, func(tx *bolt.Tx) error { // leave a store the cleanup's check accepts
				for _, name := range []string{"idempotency", "idempotency_records"} {
					if err := tx.DeleteBucket([]byte(name)); err != nil {
						return err
					}
				}
				return store.Init(kv.Wrap(tx))
			})
		})
	}
}

// Ensure Put refuses a record in no known state, storing nothing, rather
// than store bytes no Get could read.
func TestBolt_PutRefusesAnUnknownState(t *testing.T) {
	db := MustOpen(t)
	r := record("agent", "k-00000001", "d", now.Add(time.Hour))
	r.State = "running"
	if err := db.Update(func(tx *bolt.Tx) error { return store.Put(kv.Wrap(tx), r) }); err == nil {
		t.Fatal("Put stored a record in state running")
	}
	if ks, es := storedKeys(t, db), expiries(t, db); len(ks)+len(es) != 0 {
		t.Errorf("%d index entries and %d records after the refusal, want none", len(ks), len(es))
	}
}
