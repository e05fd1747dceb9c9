package boltlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/storage/bolt/kv"
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

// Log is the audit log on bbolt, bound to one transaction (Bind): the
// pipeline's audit log in a write transaction, auditlog's Reader (and
// Writer) for every reader. Lookups of what does not exist return
// auditlog.ErrNotFound.
type Log struct{ tx *kv.Tx }

var _ auditlog.Writer = Log{}

// Bind returns the log in tx, a read-only one (kv.Wrap of a *bbolt.Tx) for
// reads.
func Bind(tx *kv.Tx) Log { return Log{tx} }

// Init creates the buckets; call it once in a writable transaction. A log
// written before events carried their tree hashes is converted in place.
func Init(t *kv.Tx) error {
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

// Current reports whether tx holds a log of the current layout, one Init
// need not convert: what a reader that cannot write needs.
func Current(btx *bolt.Tx) bool {
	return btx.Bucket(eventsBucket) != nil && btx.Bucket(checkpointsBucket) != nil && btx.Bucket(legacyIDsBucket) == nil
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
// hashes it adds, as part of the transaction: it exists exactly when the
// transaction commits.
//
// Its time and id follow the previous event's (auditlog.Event.Follow),
// read from that event's bytes without decoding the rest.
func (l Log) Append(e *auditlog.Event) error {
	b, err := eventsOf(l.tx)
	if err != nil {
		return err
	}
	var prevID string
	var prevTime time.Time
	if k, last := b.Cursor().Last(); last != nil {
		if prevID, prevTime, err = stampOf(canonicalOf(int(binary.BigEndian.Uint64(k)), last)); err != nil {
			return err
		}
	}
	if err := e.Follow(prevID, prevTime); err != nil {
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

// Size implements auditlog.Reader: the last event's sequence number.
func (l Log) Size() (uint64, error) {
	b, err := eventsOf(l.tx)
	if err != nil {
		return 0, err
	}
	k, _ := b.Cursor().Last()
	if k == nil {
		return 0, nil
	}
	return binary.BigEndian.Uint64(k), nil
}

// Leaf implements auditlog.Reader.
func (l Log) Leaf(seq uint64) ([]byte, error) {
	b, err := eventsOf(l.tx)
	if err != nil {
		return nil, err
	}
	v := b.Get(seqKey(seq))
	if v == nil {
		return nil, auditlog.ErrNotFound
	}
	return canonicalOf(int(seq), v), nil
}

// Leaves implements auditlog.Reader: each event with the leaf check
// written when it was appended.
func (l Log) Leaves(from uint64) auditlog.Stream {
	return func(yield func(seq uint64, canonical []byte, leafCheck []byte) bool) error {
		b, err := eventsOf(l.tx)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.Seek(seqKey(from)); k != nil; k, v = c.Next() {
			seq := int(binary.BigEndian.Uint64(k))
			var check []byte
			if len(v) >= leafCheckSize {
				check = v[:leafCheckSize]
			}
			if !yield(uint64(seq), canonicalOf(seq, v), check) {
				return nil
			}
		}
		return nil
	}
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
