package boltlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
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

// TreeHash returns the root hash of the tree of the first size events.
func (Log) TreeHash(tx *kv.Tx, size uint64) (tlog.Hash, error) {
	b, err := eventsOf(tx)
	if err != nil {
		return tlog.Hash{}, err
	}
	if size == 0 {
		return tlog.TreeHash(0, hashReader{b})
	}
	if b.Get(seqKey(size)) == nil {
		return tlog.Hash{}, auditlog.ErrNotFound
	}
	return tlog.TreeHash(int64(size), hashReader{b})
}

// InclusionProof proves that the event of sequence number seq is a leaf of
// the tree of size events (tlog.CheckRecord checks it).
func (Log) InclusionProof(tx *kv.Tx, size, seq uint64) (tlog.RecordProof, error) {
	b, err := eventsOf(tx)
	if err != nil {
		return nil, err
	}
	if seq == 0 || seq > size || b.Get(seqKey(size)) == nil {
		return nil, auditlog.ErrNotFound
	}
	return tlog.ProveRecord(int64(size), int64(seq-1), hashReader{b})
}

// ConsistencyProof proves that the tree of size new extends the tree of
// size old, 1 <= old <= new (tlog.CheckTree checks it).
func (Log) ConsistencyProof(tx *kv.Tx, old, new uint64) (tlog.TreeProof, error) {
	b, err := eventsOf(tx)
	if err != nil {
		return nil, err
	}
	if old == 0 || old > new || b.Get(seqKey(new)) == nil {
		return nil, auditlog.ErrNotFound // every tree extends the empty one: nothing to prove
	}
	return tlog.ProveTree(int64(new), int64(old), hashReader{b})
}

// PutCheckpoint stores the signed checkpoint of the tree of size events.
func (Log) PutCheckpoint(tx *kv.Tx, size uint64, signed []byte) error {
	b, err := checkpointsOf(tx)
	if err != nil {
		return err
	}
	return b.Put(seqKey(size), signed)
}

// Checkpoints calls fn with each stored checkpoint, by tree size, smallest
// first. The bytes are valid only during fn.
func (Log) Checkpoints(tx *kv.Tx, fn func(size uint64, signed []byte) error) error {
	b, err := checkpointsOf(tx)
	if err != nil {
		return err
	}
	return b.ForEach(func(k, v []byte) error { return fn(binary.BigEndian.Uint64(k), v) })
}

// LatestCheckpoint returns the checkpoint of the largest tree, or
// auditlog.ErrNotFound if none was signed yet.
func (Log) LatestCheckpoint(tx *kv.Tx) (size uint64, signed []byte, err error) {
	b, err := checkpointsOf(tx)
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

// Stream yields the stored events for Verify, each with the leaf check
// written when it was appended.
func (Log) Stream(tx *kv.Tx) auditlog.Stream {
	return func(yield func(seq uint64, canonical []byte, leafCheck []byte) bool) error {
		b, err := eventsOf(tx)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
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

// SignedCheckpoints returns every stored checkpoint, smallest tree first.
func (l Log) SignedCheckpoints(tx *kv.Tx) ([][]byte, error) {
	var out [][]byte
	err := l.Checkpoints(tx, func(_ uint64, signed []byte) error {
		out = append(out, append([]byte(nil), signed...))
		return nil
	})
	return out, err
}

// Prefix returns the prefix of the tree of size leaves, for an export
// that starts after it.
func (Log) Prefix(tx *kv.Tx, size uint64) (auditlog.Prefix, error) {
	b, err := eventsOf(tx)
	if err != nil {
		return auditlog.Prefix{}, err
	}
	p := auditlog.Prefix{Size: size}
	var indexes []int64
	start := uint64(0)
	for left := size; left > 0; {
		level := 63 - bits.LeadingZeros64(left)
		indexes = append(indexes, tlog.StoredHashIndex(level, int64(start>>level)))
		start += 1 << level
		left -= 1 << level
	}
	if p.Hashes, err = (hashReader{b}).ReadHashes(indexes); err != nil {
		return auditlog.Prefix{}, err
	}
	return p, nil
}
