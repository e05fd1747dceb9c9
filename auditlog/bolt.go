package auditlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"
	bolt "go.etcd.io/bbolt"
)

var (
	eventsBucket = []byte("audit_events") // seq (8 bytes, big endian) → canonical event
	idsBucket    = []byte("audit_ids")    // ULID string → seq
)

// ErrTx is returned when a method is given a transaction of another backend.
var ErrTx = errors.New("auditlog: not a bbolt transaction")

// ErrNotFound is returned by Get and ByID for an event that does not exist.
var ErrNotFound = errors.New("auditlog: no such event")

// Bolt is the audit log on bbolt. Its methods take the caller's transaction
// (a *bbolt.Tx, typed any so that the pipeline stays free of bbolt).
type Bolt struct{}

// Init creates the buckets; call it once in a writable transaction.
func (Bolt) Init(tx any) error {
	btx, ok := tx.(*bolt.Tx)
	if !ok {
		return ErrTx
	}
	for _, name := range [][]byte{eventsBucket, idsBucket} {
		if _, err := btx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	return nil
}

func buckets(tx any) (events, ids *bolt.Bucket, err error) {
	btx, ok := tx.(*bolt.Tx)
	if !ok {
		return nil, nil, ErrTx
	}
	events, ids = btx.Bucket(eventsBucket), btx.Bucket(idsBucket)
	if events == nil || ids == nil {
		return nil, nil, errors.New("auditlog: buckets missing")
	}
	return events, ids, nil
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Append assigns e its sequence number and id and stores it. The event is
// part of tx: it exists exactly when tx commits.
func (Bolt) Append(tx any, e *Event) error {
	events, ids, err := buckets(tx)
	if err != nil {
		return err
	}
	seq, err := events.NextSequence()
	if err != nil {
		return fmt.Errorf("auditlog: next sequence: %w", err)
	}
	id, err := ulid.New(ulid.Timestamp(e.Time), ulid.DefaultEntropy())
	if err != nil {
		return fmt.Errorf("auditlog: new id: %w", err)
	}
	e.Seq, e.ID = seq, id.String()
	b, err := e.canonical()
	if err != nil {
		return err
	}
	if err := events.Put(seqKey(seq), b); err != nil {
		return err
	}
	return ids.Put([]byte(e.ID), seqKey(seq))
}

// Get returns the event with sequence number seq, or ErrNotFound.
func (Bolt) Get(tx any, seq uint64) (*Event, error) {
	events, _, err := buckets(tx)
	if err != nil {
		return nil, err
	}
	b := events.Get(seqKey(seq))
	if b == nil {
		return nil, ErrNotFound
	}
	return decode(b)
}

// ByID returns the event with the given ULID, or ErrNotFound.
func (l Bolt) ByID(tx any, id string) (*Event, error) {
	events, ids, err := buckets(tx)
	if err != nil {
		return nil, err
	}
	k := ids.Get([]byte(id))
	if k == nil {
		return nil, ErrNotFound
	}
	b := events.Get(k)
	if b == nil {
		return nil, fmt.Errorf("auditlog: id %s points at a missing event", id)
	}
	return decode(b)
}

// Raw calls fn with each event's sequence number and stored bytes, in
// sequence order, stopping at the first error fn returns.
func (Bolt) Raw(tx any, fn func(seq uint64, stored []byte) error) error {
	events, _, err := buckets(tx)
	if err != nil {
		return err
	}
	return events.ForEach(func(k, v []byte) error {
		return fn(binary.BigEndian.Uint64(k), v)
	})
}

// ForEach calls fn with each event in sequence order.
func (l Bolt) ForEach(tx any, fn func(*Event) error) error {
	return l.Raw(tx, func(_ uint64, stored []byte) error {
		e, err := decode(stored)
		if err != nil {
			return err
		}
		return fn(e)
	})
}
