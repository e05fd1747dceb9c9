package boltlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/oklog/ulid/v2"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// The buckets. The audit log only appends, so both are filled to the brim
// (FillPercent 1): bbolt's default of one half would leave each page half
// empty for inserts that never come.
var (
	// eventsBucket maps seq (8 bytes, big endian) to the event's value: the
	// tree hashes its append stored (see tree.go), then its canonical JSON,
	// the leaf of the Merkle tree.
	eventsBucket = []byte("audit_events")
	// checkpointsBucket maps a tree size (8 bytes, big endian) to the signed
	// checkpoint of the tree of that size.
	checkpointsBucket = []byte("audit_checkpoints")
	// legacyIDsBucket is the id index of the format before the tree; Init
	// converts a log of that format and drops it.
	legacyIDsBucket = []byte("audit_ids")
)

// Log is the audit log on bbolt. Its methods take the caller's
// transaction, a read-only one (kv.Wrap of a *bbolt.Tx) for reads;
// pipeline/boltdb binds Append to each write transaction as the
// pipeline's audit log. Lookups of what does not exist return
// auditlog.ErrNotFound.
type Log struct{}

// Init creates the buckets; call it once in a writable transaction. A log
// written before events carried their tree hashes is converted in place.
func (Log) Init(t *kv.Tx) error {
	btx := t.Bolt()
	for _, name := range [][]byte{eventsBucket, checkpointsBucket} {
		if _, err := btx.CreateBucketIfNotExists(name); err != nil {
			return err
		}
	}
	if btx.Bucket(legacyIDsBucket) != nil {
		return convertLegacy(t)
	}
	return nil
}

func eventsOf(t *kv.Tx) (*kv.Bucket, error) {
	b := t.Bucket(eventsBucket)
	if b == nil {
		return nil, errors.New("boltlog: buckets missing")
	}
	b.SetFillPercent(1)
	return b, nil
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Append assigns e its sequence number and id, stores it and the tree
// hashes it adds, as part of tx: it exists exactly when tx commits.
//
// Its time is made no earlier than the previous event's, and its ULID
// greater than the previous event's, so that both follow the sequence
// whatever the clock did (across restarts too); ByID relies on the order.
func (Log) Append(tx *kv.Tx, e *auditlog.Event) error {
	b, err := eventsOf(tx)
	if err != nil {
		return err
	}
	if k, last := b.Cursor().Last(); last != nil {
		prevID, prevTime, err := stampOf(canonicalOf(int(binary.BigEndian.Uint64(k)), last))
		if err != nil {
			return err
		}
		if e.Time.Before(prevTime) {
			e.Time = prevTime
		}
		e.ID, err = nextID(e.Time, prevID)
		if err != nil {
			return err
		}
	} else if e.ID, err = nextID(e.Time, ""); err != nil {
		return err
	}
	seq, err := b.NextSequence()
	if err != nil {
		return fmt.Errorf("boltlog: next sequence: %w", err)
	}
	e.Seq = seq
	c, err := e.Canonical()
	if err != nil {
		return err
	}
	hashes, err := tlog.StoredHashes(int64(seq-1), c, hashReader{b})
	if err != nil {
		return fmt.Errorf("boltlog: tree hashes: %w", err)
	}
	return b.Put(seqKey(seq), valueOf(hashes, c))
}

// nextID returns a ULID of the time t greater than prev (if any).
func nextID(t time.Time, prev string) (string, error) {
	id, err := ulid.New(ulid.Timestamp(t), ulid.DefaultEntropy())
	if err != nil {
		return "", fmt.Errorf("boltlog: new id: %w", err)
	}
	if prev != "" {
		p, err := ulid.ParseStrict(prev)
		if err != nil {
			return "", fmt.Errorf("boltlog: previous id: %w", err)
		}
		if id.Compare(p) <= 0 {
			id = increment(p)
		}
	}
	return id.String(), nil
}

// increment returns the ULID after u, as a 128-bit number.
func increment(u ulid.ULID) ulid.ULID {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]++
		if u[i] != 0 {
			break
		}
	}
	return u
}

// Size returns the number of events, which is the size of the tree.
func (Log) Size(tx *kv.Tx) (uint64, error) {
	b, err := eventsOf(tx)
	if err != nil {
		return 0, err
	}
	k, _ := b.Cursor().Last()
	if k == nil {
		return 0, nil
	}
	return binary.BigEndian.Uint64(k), nil
}

// Get returns the event with sequence number seq, or auditlog.ErrNotFound.
func (Log) Get(tx *kv.Tx, seq uint64) (*auditlog.Event, error) {
	b, err := eventsOf(tx)
	if err != nil {
		return nil, err
	}
	v := b.Get(seqKey(seq))
	if v == nil {
		return nil, auditlog.ErrNotFound
	}
	return auditlog.DecodeEvent(canonicalOf(int(seq), v))
}

// ByID returns the event with the given ULID, or auditlog.ErrNotFound. Ids grow with
// sequence numbers, so it is a binary search.
func (l Log) ByID(tx *kv.Tx, id string) (*auditlog.Event, error) {
	b, err := eventsOf(tx)
	if err != nil {
		return nil, err
	}
	if _, err := ulid.ParseStrict(id); err != nil {
		return nil, auditlog.ErrNotFound
	}
	size, err := l.Size(tx)
	if err != nil {
		return nil, err
	}
	var found *auditlog.Event
	var failed error
	i := sort.Search(int(size), func(i int) bool {
		if failed != nil {
			return true
		}
		e, err := auditlog.DecodeEvent(canonicalOf(i+1, b.Get(seqKey(uint64(i+1)))))
		if err != nil {
			failed = err
			return true
		}
		if e.ID == id {
			found = e
		}
		return e.ID >= id
	})
	switch {
	case failed != nil:
		return nil, failed
	case found != nil:
		return found, nil
	case i < int(size):
		if e, err := l.Get(tx, uint64(i+1)); err == nil && e.ID == id {
			return e, nil
		}
	}
	return nil, auditlog.ErrNotFound
}

// Raw calls fn with each event's sequence number and canonical bytes (the
// leaf of the tree), in sequence order, stopping at the first error fn
// returns. The bytes are valid only during fn.
func (Log) Raw(tx *kv.Tx, fn func(seq uint64, canonical []byte) error) error {
	return rawFrom(tx, 1, fn)
}

// rawFrom is Raw from the sequence number from on.
func rawFrom(tx *kv.Tx, from uint64, fn func(seq uint64, canonical []byte) error) error {
	b, err := eventsOf(tx)
	if err != nil {
		return err
	}
	c := b.Cursor()
	for k, v := c.Seek(seqKey(from)); k != nil; k, v = c.Next() {
		seq := binary.BigEndian.Uint64(k)
		if err := fn(seq, canonicalOf(int(seq), v)); err != nil {
			return err
		}
	}
	return nil
}

// Stored calls fn with each event's sequence number and its whole stored
// value, tree hashes included, in sequence order: what a verifier checks.
func (Log) Stored(tx *kv.Tx, fn func(seq uint64, value []byte) error) error {
	b, err := eventsOf(tx)
	if err != nil {
		return err
	}
	return b.ForEach(func(k, v []byte) error { return fn(binary.BigEndian.Uint64(k), v) })
}

// ForEach calls fn with each event in sequence order.
func (l Log) ForEach(tx *kv.Tx, fn func(*auditlog.Event) error) error {
	return l.Raw(tx, func(_ uint64, c []byte) error {
		e, err := auditlog.DecodeEvent(c)
		if err != nil {
			return err
		}
		return fn(e)
	})
}

// convertLegacy rewrites a log of the format before the tree (seq →
// canonical JSON, and an id index) into the current one, computing the
// tree hashes of every event, and drops the index. The canonical bytes,
// the leaves, are unchanged.
func convertLegacy(tx *kv.Tx) error {
	b := tx.Bucket(eventsBucket)
	b.SetFillPercent(1)
	var seqs []uint64
	var values [][]byte
	err := b.ForEach(func(k, v []byte) error {
		seqs = append(seqs, binary.BigEndian.Uint64(k))
		values = append(values, bytes.Clone(v))
		return nil
	})
	if err != nil {
		return err
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			return fmt.Errorf("boltlog: convert: event %d where %d was due", seq, i+1)
		}
		hashes, err := tlog.StoredHashes(int64(i), values[i], hashReader{b})
		if err != nil {
			return err
		}
		if err := b.Put(seqKey(seq), valueOf(hashes, values[i])); err != nil {
			return err
		}
	}
	return tx.Bolt().DeleteBucket(legacyIDsBucket)
}

// stampOf reads an event's id and time from its canonical JSON, skipping
// the other members: Append needs only these of the last event, once per
// write inside the commit, where decoding it all cost a tenth of the
// write's time.
func stampOf(b []byte) (id string, t time.Time, err error) {
	fail := func(why string) (string, time.Time, error) {
		return "", time.Time{}, fmt.Errorf("boltlog: decode event: %s", why)
	}
	d := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true)) // no name tracking: it allocates
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return fail("not an object")
	}
	var haveID, haveTime bool
	for d.PeekKind() == '"' && !(haveID && haveTime) {
		name, err := d.ReadValue() // a name: valid until the next read
		if err != nil {
			return fail("a member name is malformed")
		}
		isID, isTime := string(name) == `"id"`, string(name) == `"time"`
		v, err := d.ReadValue()
		switch {
		case err != nil:
			return fail("a member value is malformed")
		case !isID && !isTime:
			continue
		case v.Kind() != '"':
			return fail("its id or time is not a string")
		}
		s, err := jsontext.AppendUnquote(nil, v)
		if err != nil {
			return fail("its id or time is not a string")
		}
		if isID {
			id, haveID = string(s), true
		} else if t, err = time.Parse(time.RFC3339Nano, string(s)); err != nil {
			return fail("its time is not RFC 3339")
		} else {
			haveTime = true
		}
	}
	if !haveID || !haveTime {
		return fail("no id or time")
	}
	return id, t, nil
}
