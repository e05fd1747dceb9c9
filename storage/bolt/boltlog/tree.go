package boltlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// The Merkle tree (RFC 6962 hashing, as golang.org/x/mod/sumdb/tlog
// computes it) has one leaf per event: its canonical JSON. Record n of the
// tree (from 0) is the event of sequence number n+1.
//
// The hashes tlog stores for a tree (tlog.StoredHashes: the leaf's hash,
// then the hash of every subtree the leaf completes) are kept in front of
// the event that adds them, in its value, rather than under keys of their
// own: the event's key and bbolt's element header are shared. The leaf's
// own hash is not kept whole, since the event's bytes give it: only its
// first leafCheckSize bytes, so that a verifier names the very event that
// was edited. An event's value is therefore
//
//	leaf check (8 bytes) | the inner hashes its append completes (32 bytes each) | canonical JSON
//
// How many inner hashes an event carries follows from its sequence number
// alone (innerCount), and the stored hash of any index is found in the
// event that completed its subtree (hashReader). With writerd's 16 KiB
// pages this keeps the log within 1.3 times its events' canonical bytes,
// whether commits hold one event or many.

// leafCheckSize is how much of the leaf hash an event's value keeps.
const leafCheckSize = 8

// innerCount is how many inner hashes the event of sequence number seq
// carries: those of the subtrees it completes.
func innerCount(seq int) int {
	n := int64(seq)
	return int(tlog.StoredHashCount(n)-tlog.StoredHashCount(n-1)) - 1
}

// prefixLen is the length of an event's value before its canonical JSON.
func prefixLen(seq int) int { return leafCheckSize + innerCount(seq)*tlog.HashSize }

// canonicalOf returns the canonical JSON in an event's stored value.
func canonicalOf(seq int, v []byte) []byte {
	skip := prefixLen(seq)
	if len(v) < skip {
		return nil // decode refuses it
	}
	return v[skip:]
}

// valueOf is the stored value of an event: the hashes its append stored
// (the leaf's first), then its canonical JSON.
func valueOf(hashes []tlog.Hash, canonical []byte) []byte {
	v := make([]byte, 0, leafCheckSize+(len(hashes)-1)*tlog.HashSize+len(canonical))
	v = append(v, hashes[0][:leafCheckSize]...)
	for _, h := range hashes[1:] {
		v = append(v, h[:]...)
	}
	return append(v, canonical...)
}

// hashReader reads stored hashes out of the events bucket: an inner hash
// from the value of the event that completed its subtree, a leaf hash
// from the event's bytes.
type hashReader struct{ b *kv.Bucket }

func (r hashReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, index := range indexes {
		level, n := tlog.SplitStoredHashIndex(index)
		// The hash of level L covering records [n<<L, (n+1)<<L) is stored
		// by the append of the subtree's last record.
		seq := int((n + 1) << level) // the last record's index + 1
		v := r.b.Get(seqKey(uint64(seq)))
		if v == nil || len(v) < prefixLen(seq) {
			return nil, fmt.Errorf("boltlog: tree hash %d: event %d is missing or short", index, seq)
		}
		if level == 0 {
			out[i] = tlog.RecordHash(canonicalOf(seq, v))
			continue
		}
		if level > innerCount(seq) {
			return nil, fmt.Errorf("boltlog: tree hash %d: event %d has %d inner hashes", index, seq, innerCount(seq))
		}
		copy(out[i][:], v[leafCheckSize+(level-1)*tlog.HashSize:])
	}
	return out, nil
}

// ReadHashes implements auditlog.Reader (tlog.HashReader).
func (l Log) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	b, err := eventsOf(l.tx)
	if err != nil {
		return nil, err
	}
	return hashReader{b}.ReadHashes(indexes)
}

// PutCheckpoint stores the signed checkpoint of the tree of size events,
// replacing one of the same size (auditlog.Writer).
func (l Log) PutCheckpoint(size uint64, signed []byte) error {
	b, err := checkpointsOf(l.tx)
	if err != nil {
		return err
	}
	return b.Put(seqKey(size), signed)
}

// Checkpoints implements auditlog.Reader.
func (l Log) Checkpoints() ([][]byte, error) {
	b, err := checkpointsOf(l.tx)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	err = b.ForEach(func(_, v []byte) error {
		out = append(out, bytes.Clone(v))
		return nil
	})
	return out, err
}

// LatestCheckpoint returns the checkpoint of the largest tree, or
// auditlog.ErrNotFound if none was signed yet.
func (l Log) LatestCheckpoint() (size uint64, signed []byte, err error) {
	b, err := checkpointsOf(l.tx)
	if err != nil {
		return 0, nil, err
	}
	k, v := b.Cursor().Last()
	if k == nil {
		return 0, nil, auditlog.ErrNotFound
	}
	return binary.BigEndian.Uint64(k), append([]byte(nil), v...), nil
}

func checkpointsOf(t *kv.Tx) (*kv.Bucket, error) {
	b := t.Bucket(checkpointsBucket)
	if b == nil {
		return nil, errors.New("boltlog: buckets missing")
	}
	b.SetFillPercent(1)
	return b, nil
}
