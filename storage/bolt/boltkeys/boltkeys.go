package boltkeys

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
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
// A store of the earlier layout (one bucket of JSON records by principal
// and key, and an expiry index beside it) is converted when it opens.
var (
	indexBucket  = []byte("idempotency")
	recordBucket = []byte("idempotency_records")
	legacyExpiry = []byte("idempotency_expiry")
)

// recordKeySize is the size of a record's storage key.
const recordKeySize = 16

// Store is the record store on bbolt. Its methods take the caller's
// transaction and never open one of their own; storage/bolt binds them
// to each transaction as the pipeline's key store.
type Store struct{}

// Init creates the buckets; call it once in a writable transaction. A
// store of the earlier layout is converted.
func (Store) Init(t *kv.Tx) error {
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
// Init need not convert: what a reader that cannot write needs.
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

// Put stores r, replacing an expired record of the same key.
func (Store) Put(tx *kv.Tx, r *idempotency.Record) error {
	index, records, err := buckets(tx)
	if err != nil {
		return err
	}
	ik := indexKey(r.Principal, r.Key)
	if old := index.Get(ik); old != nil {
		if err := records.Delete(bytes.Clone(old)); err != nil {
			return err
		}
	}
	seq, err := records.NextSequence()
	if err != nil {
		return err
	}
	v, err := marshal(r)
	if err != nil {
		return err
	}
	rk := recordKey(r.ExpiresAt, seq)
	if err := records.Put(rk, v); err != nil {
		return err
	}
	return index.Put(ik, rk)
}

// HasExpired reports whether any record has expired at now: a read, so
// that a collector opens no write transaction when nothing expired.
func (Store) HasExpired(tx *kv.Tx, now time.Time) (bool, error) {
	_, records, err := buckets(tx)
	if err != nil {
		return false, err
	}
	k, _ := records.Cursor().First()
	return k != nil && !now.Before(expiryOf(k)), nil
}

// Collect deletes up to limit expired records, the earliest first, with
// their index entries: it touches expired records only. It reports how
// many it deleted and whether expired records remain.
func (Store) Collect(tx *kv.Tx, now time.Time, limit int) (deleted int, more bool, err error) {
	index, records, err := buckets(tx)
	if err != nil {
		return 0, false, err
	}
	type entry struct{ rk, ik []byte }
	var expired []entry
	c := records.Cursor()
	k, v := c.First()
	for ; k != nil && len(expired) < limit && !now.Before(expiryOf(k)); k, v = c.Next() {
		principal, key, err := owner(v)
		if err != nil {
			return 0, false, err
		}
		expired = append(expired, entry{bytes.Clone(k), indexKey(principal, key)})
	}
	more = k != nil && !now.Before(expiryOf(k))
	// Deleting while a cursor walks the bucket skips items; delete after.
	for _, e := range expired {
		if err := records.Delete(e.rk); err != nil {
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
// naming it by its own principal and key, and returns every problem found,
// joined.
func (Store) Check(tx *kv.Tx) error {
	index, records, err := buckets(tx)
	if err != nil {
		return err
	}
	var errs []error
	indexed := 0
	err = records.ForEach(func(rk, v []byte) error {
		principal, key, err := owner(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("idempotency record %x: %w", rk, err))
			return nil
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
	return errors.Join(errs...)
}
