package boltkeys

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/storage/bolt/kv"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func mustOpen(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mustUpdate(t, db, func(tx *kv.Tx) error { return Store{}.Init(tx) })
	return db
}

func mustUpdate(t *testing.T, db *bolt.DB, fn func(*kv.Tx) error) {
	t.Helper()
	if err := db.Update(func(tx *bolt.Tx) error { return fn(kv.Wrap(tx)) }); err != nil {
		t.Fatal(err)
	}
}

func pendingRecord(key string, expires time.Time) *idempotency.Record {
	return &idempotency.Record{Principal: "agent", Key: key, Tool: "t", Digest: "d", State: idempotency.Pending,
		CreatedAt: t0, ExpiresAt: expires, Owner: "p-1", Attempt: 1, LeaseUntil: t0.Add(time.Minute), Args: []byte(`{}`)}
}

// Ensure an unsettled record is stored under the latest expiry a storage
// key holds, whatever its own (idempotency.Never, past what UnixNano
// gives, or one already past), and settled under its own again.
func TestBolt_UnsettledStoredLast(t *testing.T) {
	db := mustOpen(t)
	never, past := pendingRecord("k-1", idempotency.Never), pendingRecord("k-2", t0.Add(-time.Hour))
	mustUpdate(t, db, func(tx *kv.Tx) error {
		if err := (Store{}).Put(tx, never); err != nil {
			return err
		}
		return Store{}.Put(tx, past)
	})
	expiries := func() map[string]time.Time {
		m := map[string]time.Time{}
		db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(recordBucket).ForEach(func(k, v []byte) error {
				_, key, _ := owner(v)
				m[key] = expiryOf(k)
				return nil
			})
		})
		return m
	}
	for key, at := range expiries() {
		if !at.Equal(lastNano) {
			t.Errorf("pending %s is stored under %s, want %s", key, at, lastNano)
		}
	}
	done := *past
	done.State, done.Args, done.AuditID, done.ExpiresAt = idempotency.Completed, nil, "a", t0.Add(time.Hour)
	mustUpdate(t, db, func(tx *kv.Tx) error { return Store{}.Put(tx, &done) })
	if at := expiries()["k-2"]; !at.Equal(done.ExpiresAt) {
		t.Errorf("the settled record is stored under %s, want its expiry %s", at, done.ExpiresAt)
	}
	if err := db.View(func(tx *bolt.Tx) error { return Store{}.Check(kv.Wrap(tx)) }); err != nil {
		t.Errorf("Check: %v", err)
	}
}

// Ensure the collector skips an unsettled record stored under a past
// expiry, as no Put stores one (belt and braces), collecting the expired
// records past it, and HasExpired does not count it.
func TestBolt_CollectSkipsAnUnsettledRecord(t *testing.T) {
	db := mustOpen(t)
	stuck := pendingRecord("k-0", t0.Add(-2*time.Hour))
	expired := &idempotency.Record{Principal: "agent", Key: "k-1", Tool: "t", Digest: "d", State: idempotency.Completed,
		AuditID: "a", CreatedAt: t0.Add(-time.Hour), ExpiresAt: t0.Add(-time.Hour)}
	mustUpdate(t, db, func(tx *kv.Tx) error {
		v, err := marshal(stuck)
		if err != nil {
			return err
		}
		rk := recordKey(stuck.ExpiresAt, 0)
		if err := tx.Bucket(recordBucket).Put(rk, v); err != nil {
			return err
		}
		if err := tx.Bucket(unsettledBucket).Put(unsettledKey(stuck), rk); err != nil {
			return err
		}
		return tx.Bucket(indexBucket).Put(indexKey(stuck.Principal, stuck.Key), rk)
	})
	check := func(wantDue bool) {
		t.Helper()
		db.View(func(tx *bolt.Tx) error {
			if due, err := (Store{}).HasExpired(kv.Wrap(tx), t0); due != wantDue || err != nil {
				t.Errorf("HasExpired = %v, %v, want %v", due, err, wantDue)
			}
			return nil
		})
	}
	check(false)
	mustUpdate(t, db, func(tx *kv.Tx) error { return Store{}.Put(tx, expired) })
	check(true)
	mustUpdate(t, db, func(tx *kv.Tx) error {
		n, more, err := Store{}.Collect(tx, t0, 10)
		if n != 1 || more {
			t.Errorf("Collect = %d, %v, want the one expired record and no more", n, more)
		}
		return err
	})
	check(false)
	db.View(func(tx *bolt.Tx) error {
		if r, err := (Store{}).Get(kv.Wrap(tx), "agent", "k-0"); r == nil || err != nil {
			t.Errorf("the pending record after collection: %v, %v", r, err)
		}
		return nil
	})
}

// Ensure Check finds an unsettled index that disagrees with the records.
func TestBolt_CheckFindsADamagedUnsettledIndex(t *testing.T) {
	for name, damage := range map[string]func(u *bolt.Bucket) error{
		"a pending record without its entry": func(u *bolt.Bucket) error {
			return u.Delete(unsettledKey(pendingRecord("k-1", idempotency.Never)))
		},
		"an entry without its record": func(u *bolt.Bucket) error {
			r := pendingRecord("k-9", idempotency.Never)
			return u.Put(unsettledKey(r), bytes.Repeat([]byte{0xff}, recordKeySize))
		},
	} {
		t.Run(name, func(t *testing.T) {
			db := mustOpen(t)
			mustUpdate(t, db, func(tx *kv.Tx) error { return Store{}.Put(tx, pendingRecord("k-1", idempotency.Never)) })
			if err := db.Update(func(tx *bolt.Tx) error { return damage(tx.Bucket(unsettledBucket)) }); err != nil {
				t.Fatal(err)
			}
			err := db.View(func(tx *bolt.Tx) error { return Store{}.Check(kv.Wrap(tx)) })
			if err == nil || !strings.Contains(err.Error(), "unsettled") {
				t.Errorf("Check = %v, want the unsettled index named", err)
			}
		})
	}
}
