package idempotency

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// bucket holds one record per principal and key, under principal 0x00 key;
// expiryBucket indexes them by expiry: expires-at (8 bytes, big-endian Unix
// nanoseconds) then the record's key, with no value. The index only grows
// at its end (time goes forward) and is cut from its start, so it is
// filled to the brim, and collection touches expired records only.
var (
	bucket       = []byte("idempotency")
	expiryBucket = []byte("idempotency_expiry")
)

// ErrTx is returned when a method is given a transaction of another backend.
var ErrTx = errors.New("idempotency: not a bbolt transaction")

// Bolt is the record store on bbolt. Its methods take the caller's
// transaction (a *kv.Tx or a *bbolt.Tx, typed any so that the pipeline
// stays free of bbolt) and never open one of their own.
type Bolt struct{}

// Init creates the buckets; call it once in a writable transaction. A
// store of before the expiry index gets one, built from its records.
func (Bolt) Init(tx any) error {
	t, err := kv.Of(tx)
	if err != nil {
		return ErrTx
	}
	if _, err = t.Bolt().CreateBucketIfNotExists(bucket); err != nil {
		return err
	}
	if t.Bolt().Bucket(expiryBucket) != nil {
		return nil
	}
	if _, err := t.Bolt().CreateBucket(expiryBucket); err != nil {
		return err
	}
	records, index := t.Bucket(bucket), t.Bucket(expiryBucket)
	return records.ForEach(func(k, v []byte) error {
		r, err := unmarshal(v)
		if err != nil {
			return fmt.Errorf("idempotency: decode record: %w", err)
		}
		return index.Put(expiryKey(r.ExpiresAt, k), nil)
	})
}

// expiryKey is a record's entry in the expiry index.
func expiryKey(expires time.Time, storage []byte) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(storage)), uint64(expires.UnixNano()))
	return append(k, storage...)
}

func storageKey(principal, key string) []byte {
	k := make([]byte, 0, len(principal)+1+len(key))
	k = append(k, principal...)
	k = append(k, 0)
	return append(k, key...)
}

func recordBucket(tx any) (*kv.Bucket, error) {
	records, _, err := buckets(tx)
	return records, err
}

func buckets(tx any) (records, index *kv.Bucket, err error) {
	t, err := kv.Of(tx)
	if err != nil {
		return nil, nil, ErrTx
	}
	records, index = t.Bucket(bucket), t.Bucket(expiryBucket)
	if records == nil || index == nil {
		return nil, nil, errors.New("idempotency: bucket missing")
	}
	index.SetFillPercent(1)
	return records, index, nil
}

// Get returns the record of principal's key, or nil if there is none. It
// returns expired records too; Match treats them as absent.
func (Bolt) Get(tx any, principal, key string) (*Record, error) {
	b, err := recordBucket(tx)
	if err != nil {
		return nil, err
	}
	v := b.Get(storageKey(principal, key))
	if v == nil {
		return nil, nil
	}
	r, err := unmarshal(v)
	if err != nil {
		return nil, fmt.Errorf("idempotency: decode record: %w", err)
	}
	return r, nil
}

// Put stores r, replacing an expired record of the same key, and indexes
// it by its expiry.
func (Bolt) Put(tx any, r *Record) error {
	records, index, err := buckets(tx)
	if err != nil {
		return err
	}
	k := storageKey(r.Principal, r.Key)
	if old := records.Get(k); old != nil {
		prev, err := unmarshal(old)
		if err != nil {
			return fmt.Errorf("idempotency: decode record: %w", err)
		}
		if err := index.Delete(expiryKey(prev.ExpiresAt, k)); err != nil {
			return err
		}
	}
	v, err := r.marshal()
	if err != nil {
		return fmt.Errorf("idempotency: encode record: %w", err)
	}
	if err := records.Put(k, v); err != nil {
		return err
	}
	return index.Put(expiryKey(r.ExpiresAt, k), nil)
}

// HasExpired reports whether any record has expired at now: a read, so
// that a collector opens no write transaction when nothing expired.
func (Bolt) HasExpired(tx any, now time.Time) (bool, error) {
	_, index, err := buckets(tx)
	if err != nil {
		return false, err
	}
	k, _ := index.Cursor().First()
	return k != nil && !now.Before(time.Unix(0, int64(binary.BigEndian.Uint64(k)))), nil
}

// Collect deletes up to limit expired records, the earliest first, through
// the expiry index: it touches expired records only. It reports how many it
// deleted and whether expired records remain.
func (Bolt) Collect(tx any, now time.Time, limit int) (deleted int, more bool, err error) {
	records, index, err := buckets(tx)
	if err != nil {
		return 0, false, err
	}
	var entries [][]byte
	c := index.Cursor()
	k, _ := c.First()
	for ; k != nil && len(entries) < limit; k, _ = c.Next() {
		if now.Before(time.Unix(0, int64(binary.BigEndian.Uint64(k)))) {
			break
		}
		entries = append(entries, bytes.Clone(k))
	}
	more = k != nil && len(entries) == limit && !now.Before(time.Unix(0, int64(binary.BigEndian.Uint64(k))))
	// Deleting while a cursor walks the bucket skips items; delete after.
	for _, e := range entries {
		if err := records.Delete(e[8:]); err != nil {
			return 0, false, err
		}
		if err := index.Delete(e); err != nil {
			return 0, false, err
		}
	}
	return len(entries), more, nil
}

// ForEach calls fn with every record, expired or not, in storage order,
// stopping at the first error fn returns.
func (Bolt) ForEach(tx any, fn func(*Record) error) error {
	b, err := recordBucket(tx)
	if err != nil {
		return err
	}
	return b.ForEach(func(_, v []byte) error {
		r, err := unmarshal(v)
		if err != nil {
			return fmt.Errorf("idempotency: decode record: %w", err)
		}
		return fn(r)
	})
}
