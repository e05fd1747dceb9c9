package auditlog

import (
	"math/bits"

	"golang.org/x/mod/sumdb/tlog"
)

// The Merkle tree has one leaf per event, its canonical JSON, hashed as
// RFC 6962 prescribes (golang.org/x/mod/sumdb/tlog); record n of the tree
// (from 0) is the event of sequence number n+1. Roots and proofs are
// computed from the hashes a backend stored at each append (Reader's
// ReadHashes), never by rehashing the log.

// TreeHash returns the root hash of the tree of the first size events, or
// ErrNotFound if the log holds no event size.
func TreeHash(r Reader, size uint64) (tlog.Hash, error) {
	if size > 0 {
		if _, err := r.Leaf(size); err != nil {
			return tlog.Hash{}, err
		}
	}
	return tlog.TreeHash(int64(size), r)
}

// InclusionProof proves that the event of sequence number seq is a leaf of
// the tree of size events (tlog.CheckRecord checks it), or returns
// ErrNotFound if seq is not in that tree or the log holds no event size.
func InclusionProof(r Reader, size, seq uint64) (tlog.RecordProof, error) {
	if seq == 0 || seq > size {
		return nil, ErrNotFound
	}
	if _, err := r.Leaf(size); err != nil {
		return nil, err
	}
	return tlog.ProveRecord(int64(size), int64(seq-1), r)
}

// ConsistencyProof proves that the tree of size new extends the tree of
// size old, 1 <= old <= new (tlog.CheckTree checks it); every tree extends
// the empty one, so old 0 has nothing to prove and is ErrNotFound, as is a
// new the log does not reach.
func ConsistencyProof(r Reader, old, new uint64) (tlog.TreeProof, error) {
	if old == 0 || old > new {
		return nil, ErrNotFound
	}
	if _, err := r.Leaf(new); err != nil {
		return nil, err
	}
	return tlog.ProveTree(int64(new), int64(old), r)
}

// PrefixOf returns the prefix of the tree of size leaves, for an export
// that starts after it: the roots of its perfect subtrees, largest first.
func PrefixOf(r Reader, size uint64) (Prefix, error) {
	p := Prefix{Size: size}
	var indexes []int64
	start := uint64(0)
	for left := size; left > 0; {
		level := 63 - bits.LeadingZeros64(left)
		indexes = append(indexes, tlog.StoredHashIndex(level, int64(start>>level)))
		start += 1 << level
		left -= 1 << level
	}
	var err error
	if p.Hashes, err = r.ReadHashes(indexes); err != nil {
		return Prefix{}, err
	}
	return p, nil
}
