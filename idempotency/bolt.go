package idempotency

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// bucket holds one record per principal and key, under principal 0x00 key.
var bucket = []byte("idempotency")

// ErrTx is returned when a method is given a transaction of another backend.
var ErrTx = errors.New("idempotency: not a bbolt transaction")

// Bolt is the record store on bbolt. Its methods take the caller's
// transaction (a *bbolt.Tx, typed any so that the pipeline stays free of
// bbolt) and never open one of their own.
type Bolt struct{}

// Init creates the bucket; call it once in a writable transaction.
func (Bolt) Init(tx any) error {
	t, err := kv.Of(tx)
	if err != nil {
		return ErrTx
	}
	_, err = t.Bolt().CreateBucketIfNotExists(bucket)
	return err
}

func storageKey(principal, key string) []byte {
	k := make([]byte, 0, len(principal)+1+len(key))
	k = append(k, principal...)
	k = append(k, 0)
	return append(k, key...)
}

func recordBucket(tx any) (*kv.Bucket, error) {
	t, err := kv.Of(tx)
	if err != nil {
		return nil, ErrTx
	}
	b := t.Bucket(bucket)
	if b == nil {
		return nil, errors.New("idempotency: bucket missing")
	}
	return b, nil
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

// Put stores r, replacing an expired record of the same key.
func (Bolt) Put(tx any, r *Record) error {
	b, err := recordBucket(tx)
	if err != nil {
		return err
	}
	v, err := r.marshal()
	if err != nil {
		return fmt.Errorf("idempotency: encode record: %w", err)
	}
	return b.Put(storageKey(r.Principal, r.Key), v)
}

// Collect deletes expired records in one bounded step: it looks at no more
// than limit records, starting after the storage key from (nil: from the
// start), and returns where the next step resumes (nil once it reached the
// end) and how many it deleted.
func (Bolt) Collect(tx any, now time.Time, from []byte, limit int) (next []byte, deleted int, err error) {
	b, err := recordBucket(tx)
	if err != nil {
		return nil, 0, err
	}
	var expired [][]byte
	c := b.Cursor()
	k, v := c.First()
	if from != nil {
		if k, v = c.Seek(from); bytes.Equal(k, from) {
			k, v = c.Next()
		}
	}
	for seen := 0; k != nil && seen < limit; seen++ {
		r, err := unmarshal(v)
		if err != nil {
			return nil, 0, fmt.Errorf("idempotency: decode record: %w", err)
		}
		if r.Expired(now) {
			expired = append(expired, bytes.Clone(k))
		}
		next = bytes.Clone(k)
		k, v = c.Next()
	}
	if k == nil {
		next = nil // reached the end: the next step starts over
	}
	// Deleting while a cursor walks the bucket skips items; delete after.
	for _, k := range expired {
		if err := b.Delete(k); err != nil {
			return nil, 0, err
		}
	}
	return next, len(expired), nil
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
