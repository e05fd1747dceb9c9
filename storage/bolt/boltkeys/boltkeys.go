package boltkeys

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// The buckets. Records are stored in the order they expire, under
// expires-at (8 bytes, big-endian Unix nanoseconds) then a sequence number
// (8 bytes), so that the record bucket grows at its end (time goes
// forward), filled to the brim, and collection cuts it from its start,
// touching expired records only. The index maps principal 0x00 key to the
// record's storage key: the only bucket a write inserts into at a random
// place, with entries of some 60 bytes.
//
// An unsettled record (pending, or unknown with no resolution: writes
// outside the store, docs/DESIGN.md section 5b) is stored under the
// largest expiry a key holds, whatever its ExpiresAt, so that collection
// never reaches it; and the unsettled index holds an entry for each,
// created-at (8 bytes, big-endian, ordered as signed Unix nanoseconds)
// then principal 0x00 key, naming the record's storage key, so that Unsettled reads them
// oldest first without a scan of every record.
//
// A store of the earlier layout (one bucket of JSON records by principal
// and key, and an expiry index beside it) is converted when it opens.
var (
	indexBucket     = []byte("idempotency")
	recordBucket    = []byte("idempotency_records")
	unsettledBucket = []byte("idempotency_unsettled")
	legacyExpiry    = []byte("idempotency_expiry")
)

// recordKeySize is the size of a record's storage key.
const recordKeySize = 16

// Store is the record store on bbolt. Its methods take the caller's
// transaction and never open one of their own; storage/bolt binds them
// to each transaction as the pipeline's key store.
type Store struct{}

// Init creates the buckets; call it once in a writable transaction. A
// store of the earlier layout is converted; one of the layout before the
// unsettled index gains it, empty (that writerd wrote no unsettled
// record).
func (Store) Init(t *kv.Tx) error {
	if _, err := t.Bolt().CreateBucketIfNotExists(unsettledBucket); err != nil {
		return err
	}
	if t.Bolt().Bucket(recordBucket) != nil {
		return nil
	}
	var legacy []*idempotency.Record
	if old := t.Bolt().Bucket(indexBucket); old != nil {
		err := old.ForEach(func(_, v []byte) error {
			r, err := unmarshalJSON(v)
			if err != nil {
				return fmt.Errorf("boltkeys: convert a record: %w", err)
			}
			legacy = append(legacy, r)
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range [][]byte{indexBucket, legacyExpiry} {
			if t.Bolt().Bucket(name) == nil {
				continue
			}
			if err := t.Bolt().DeleteBucket(name); err != nil {
				return err
			}
		}
	}
	for _, name := range [][]byte{indexBucket, recordBucket} {
		if _, err := t.Bolt().CreateBucket(name); err != nil {
			return err
		}
	}
	for _, r := range legacy {
		if err := (Store{}).Put(t, r); err != nil {
			return fmt.Errorf("boltkeys: convert a record: %w", err)
		}
	}
	return nil
}

// Current reports whether tx holds records of the current layout, which
// Init need not convert: what a reader that cannot write needs. A store
// without the unsettled index is current: it holds no unsettled record.
func Current(btx *bolt.Tx) bool {
	return btx.Bucket(indexBucket) != nil && btx.Bucket(recordBucket) != nil
}

// indexKey is a record's key in the index: principal 0x00 key.
func indexKey(principal, key string) []byte {
	k := make([]byte, 0, len(principal)+1+len(key))
	k = append(k, principal...)
	k = append(k, 0)
	return append(k, key...)
}

// recordKey is a record's storage key: its expiry, then seq.
func recordKey(expires time.Time, seq uint64) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, recordKeySize), uint64(expires.UnixNano()))
	return binary.BigEndian.AppendUint64(k, seq)
}

// lastNano is the latest time a storage key holds, some time in 2262:
// the storage key of every record that expires later or never.
var lastNano = time.Unix(0, math.MaxInt64)

// nanos is t in Unix nanoseconds, the latest a storage key holds if t
// is later (idempotency.Never is, which UnixNano cannot give).
func nanos(t time.Time) int64 {
	if t.After(lastNano) {
		return math.MaxInt64
	}
	return t.UnixNano()
}

// storageExpiry is the expiry r is stored under: its own, or for an
// unsettled record, which never expires, the latest a key holds.
func storageExpiry(r *idempotency.Record) time.Time {
	if unsettled(r) {
		return lastNano
	}
	return r.ExpiresAt
}

// unsettled reports whether r is pending, or unknown with no resolution.
func unsettled(r *idempotency.Record) bool {
	return r.State == idempotency.Pending || r.State == idempotency.Unknown && r.Resolution == ""
}

// unsettledKey is a record's key in the unsettled index: its creation
// time, ordered as signed nanoseconds, then principal 0x00 key.
func unsettledKey(r *idempotency.Record) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(r.Principal)+1+len(r.Key)), uint64(nanos(r.CreatedAt))^1<<63)
	return append(k, indexKey(r.Principal, r.Key)...)
}

// expiryOf reads the expiry out of a record's storage key.
func expiryOf(k []byte) time.Time { return time.Unix(0, int64(binary.BigEndian.Uint64(k))) }

func buckets(t *kv.Tx) (index, records *kv.Bucket, err error) {
	index, records = t.Bucket(indexBucket), t.Bucket(recordBucket)
	if index == nil || records == nil {
		return nil, nil, errors.New("boltkeys: bucket missing")
	}
	records.SetFillPercent(1)
	return index, records, nil
}

// unsettledOf returns the unsettled index, which a write needs; a read
// of a store of the layout before it (read-only, not given it by Init)
// gets nil, an index with no entry.
func unsettledOf(t *kv.Tx) (*kv.Bucket, error) {
	u := t.Bucket(unsettledBucket)
	if u == nil && t.Writable() {
		return nil, errors.New("boltkeys: bucket missing")
	}
	return u, nil
}

// drop deletes the record stored under rk, and its unsettled index entry
// if it has one, but not its index entry.
func drop(records, unsettledIdx *kv.Bucket, rk []byte) error {
	rk = bytes.Clone(rk)
	if v := records.Get(rk); v != nil {
		if _, _, open, err := header(v); err != nil {
			return err
		} else if open {
			r, err := unmarshal(v)
			if err != nil {
				return err
			}
			if err := unsettledIdx.Delete(unsettledKey(r)); err != nil {
				return err
			}
		}
	}
	return records.Delete(rk)
}

// Get returns the record of principal's key, or nil if there is none. It
// returns expired records too; Match treats them as absent.
func (Store) Get(tx *kv.Tx, principal, key string) (*idempotency.Record, error) {
	index, records, err := buckets(tx)
	if err != nil {
		return nil, err
	}
	rk := index.Get(indexKey(principal, key))
	if rk == nil {
		return nil, nil
	}
	v := records.Get(rk)
	if v == nil {
		return nil, fmt.Errorf("boltkeys: the index names a missing record")
	}
	return unmarshal(v)
}

// Put stores r, replacing the record of the same key (an expired one, or
// the pending one of a write outside the store that r settles).
func (Store) Put(tx *kv.Tx, r *idempotency.Record) error {
	index, records, err := buckets(tx)
	if err != nil {
		return err
	}
	unsettledIdx, err := unsettledOf(tx)
	if err != nil {
		return err
	}
	v, err := marshal(r)
	if err != nil {
		return err
	}
	ik := indexKey(r.Principal, r.Key)
	if old := index.Get(ik); old != nil {
		if err := drop(records, unsettledIdx, old); err != nil {
			return err
		}
	}
	seq, err := records.NextSequence()
	if err != nil {
		return err
	}
	rk := recordKey(storageExpiry(r), seq)
	if err := records.Put(rk, v); err != nil {
		return err
	}
	if unsettled(r) {
		if err := unsettledIdx.Put(unsettledKey(r), rk); err != nil {
			return err
		}
	}
	return index.Put(ik, rk)
}

// Delete removes principal's record of key and its index entries, if
// there is one.
func (Store) Delete(tx *kv.Tx, principal, key string) error {
	index, records, err := buckets(tx)
	if err != nil {
		return err
	}
	unsettledIdx, err := unsettledOf(tx)
	if err != nil {
		return err
	}
	ik := indexKey(principal, key)
	rk := index.Get(ik)
	if rk == nil {
		return nil
	}
	if err := drop(records, unsettledIdx, rk); err != nil {
		return err
	}
	return index.Delete(ik)
}

// Unsettled calls fn with every pending record and every unknown one
// with no resolution, the oldest created first, reading the unsettled
// index and their records only; it stops at the first error fn returns.
func (Store) Unsettled(tx *kv.Tx, fn func(*idempotency.Record) error) error {
	_, records, err := buckets(tx)
	if err != nil {
		return err
	}
	unsettledIdx, err := unsettledOf(tx)
	if err != nil || unsettledIdx == nil {
		return err
	}
	// The records are read first: fn may write in the transaction.
	var rs []*idempotency.Record
	c := unsettledIdx.Cursor()
	for _, rk := c.First(); rk != nil; _, rk = c.Next() {
		v := records.Get(rk)
		if v == nil {
			return fmt.Errorf("boltkeys: the unsettled index names a missing record")
		}
		r, err := unmarshal(v)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	for _, r := range rs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// expiredFrom moves c from k, v past the unsettled records, which never
// expire, and reports whether it stopped at a record expired at now. An
// unsettled record is stored under the latest expiry (storageExpiry), so
// that it is skipped only if one is stored otherwise: belt and braces.
func expiredFrom(c *bolt.Cursor, k, v []byte, now time.Time) (rk, rv []byte, expired bool, err error) {
	for ; k != nil && !now.Before(expiryOf(k)); k, v = c.Next() {
		_, _, open, err := header(v)
		if err != nil {
			return nil, nil, false, err
		}
		if !open {
			return k, v, true, nil
		}
	}
	return k, v, false, nil
}

// HasExpired reports whether any record has expired at now: a read, so
// that a collector opens no write transaction when nothing expired.
func (Store) HasExpired(tx *kv.Tx, now time.Time) (bool, error) {
	_, records, err := buckets(tx)
	if err != nil {
		return false, err
	}
	c := records.Cursor()
	k, v := c.First()
	_, _, expired, err := expiredFrom(c, k, v, now)
	return expired, err
}

// Collect deletes up to limit expired records, the earliest first, with
// their index entries: it touches expired records only, and never an
// unsettled one (pending, or unknown with no resolution), whatever its
// expiry. It reports how many it deleted and whether expired records
// remain.
func (Store) Collect(tx *kv.Tx, now time.Time, limit int) (deleted int, more bool, err error) {
	index, records, err := buckets(tx)
	if err != nil {
		return 0, false, err
	}
	unsettledIdx, err := unsettledOf(tx)
	if err != nil {
		return 0, false, err
	}
	type entry struct{ rk, ik []byte }
	var expired []entry
	c := records.Cursor()
	k, v := c.First()
	for {
		var ok bool
		if k, v, ok, err = expiredFrom(c, k, v, now); err != nil {
			return 0, false, err
		}
		if !ok || len(expired) == limit {
			more = ok
			break
		}
		principal, key, err := owner(v)
		if err != nil {
			return 0, false, err
		}
		expired = append(expired, entry{bytes.Clone(k), indexKey(principal, key)})
		k, v = c.Next()
	}
	// Deleting while a cursor walks the bucket skips items; delete after.
	for _, e := range expired {
		if err := drop(records, unsettledIdx, e.rk); err != nil {
			return 0, false, err
		}
		if err := index.Delete(e.ik); err != nil {
			return 0, false, err
		}
	}
	return len(expired), more, nil
}

// ForEach calls fn with every record, expired or not, in the order they
// expire, stopping at the first error fn returns.
func (Store) ForEach(tx *kv.Tx, fn func(*idempotency.Record) error) error {
	_, records, err := buckets(tx)
	if err != nil {
		return err
	}
	return records.ForEach(func(_, v []byte) error {
		r, err := unmarshal(v)
		if err != nil {
			return err
		}
		return fn(r)
	})
}

// Check verifies the index against the records, one entry per record
// naming it by its own principal and key, and the unsettled index, one
// entry per unsettled record, and that every record decodes; it returns
// every problem found, joined.
func (Store) Check(tx *kv.Tx) error {
	index, records, err := buckets(tx)
	if err != nil {
		return err
	}
	unsettledIdx, err := unsettledOf(tx)
	if err != nil {
		return err
	}
	var errs []error
	indexed, open := 0, 0
	err = records.ForEach(func(rk, v []byte) error {
		principal, key, isOpen, err := header(v)
		if err == nil {
			_, err = unmarshal(v)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("idempotency record %x: %w", rk, err))
			return nil
		}
		if isOpen {
			r, _ := unmarshal(v)
			if unsettledIdx == nil || !bytes.Equal(unsettledIdx.Get(unsettledKey(r)), rk) {
				errs = append(errs, fmt.Errorf("idempotency record %s/%s is %s and not in the unsettled index", principal, key, r.State))
			} else {
				open++
			}
		}
		if len(rk) != recordKeySize {
			errs = append(errs, fmt.Errorf("idempotency record %s/%s has a storage key of %d bytes", principal, key, len(rk)))
		}
		if got := index.Get(indexKey(principal, key)); !bytes.Equal(got, rk) {
			errs = append(errs, fmt.Errorf("idempotency record %s/%s is not the one its index entry names", principal, key))
		} else {
			indexed++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n := index.Stats().KeyN; n != indexed {
		errs = append(errs, fmt.Errorf("the idempotency index has %d entries for %d records", n, indexed))
	}
	if unsettledIdx != nil {
		if n := unsettledIdx.Stats().KeyN; n != open {
			errs = append(errs, fmt.Errorf("the unsettled index has %d entries for %d unsettled records", n, open))
		}
	}
	return errors.Join(errs...)
}
