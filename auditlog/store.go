package auditlog

import (
	"context"

	"golang.org/x/mod/sumdb/tlog"
)

// Reader is the read seam of an audit log: what a backend keeps of it, in
// one consistent state (one transaction). Everything else an auditor
// reads (an event by id, the filtered list, roots, proofs, exports) is
// computed from it by this package, so that it is the same on every
// backend. Events are dense from sequence number 1 on an untouched log;
// a Reader reports what is stored, gaps and all, and leaves it to Verify
// to say what is wrong.
type Reader interface {
	// Size returns the sequence number of the last event stored, which is
	// the size of the tree: 0 for an empty log.
	Size() (uint64, error)
	// Leaf returns the canonical JSON of the event of sequence number seq,
	// the leaf of the tree, or ErrNotFound. The bytes are valid until the
	// transaction ends.
	Leaf(seq uint64) ([]byte, error)
	// Leaves streams the events stored from sequence number from on, in
	// sequence order: each one's sequence number as stored, its canonical
	// JSON and the leaf check it was appended with (see Stream).
	Leaves(from uint64) Stream
	// ReadHashes returns the tree's stored hashes at the indexes
	// golang.org/x/mod/sumdb/tlog gives them (tlog.HashReader): what roots
	// and proofs are computed from, without rehashing the log.
	ReadHashes(indexes []int64) ([]tlog.Hash, error)
	// Checkpoints returns every stored signed checkpoint, smallest tree
	// first.
	Checkpoints() ([][]byte, error)
	// LatestCheckpoint returns the checkpoint of the largest tree and that
	// tree's size, or ErrNotFound if none was signed yet.
	LatestCheckpoint() (size uint64, signed []byte, err error)
}

// Writer is a Reader inside a write transaction, which can also store a
// signed checkpoint: the one write of the audit log outside a call's own
// transaction (events are appended in the call's, by the pipeline).
type Writer interface {
	Reader
	// PutCheckpoint stores the signed checkpoint of the tree of size
	// events. Storing again for a size already stored replaces that
	// checkpoint: a tree of a size has one root, and that is how the
	// witnesses' cosignatures are kept (the same note, its cosignature
	// lines added; package witness). Only the cosigner stores a size
	// again; the checkpointer signs each size once.
	PutCheckpoint(size uint64, signed []byte) error
}

// Viewer reads the store an audit log lives in: what the audit protocol
// needs of a backend.
type Viewer interface {
	// View runs fn on one consistent state of the log.
	View(ctx context.Context, fn func(Reader) error) error
}

// Storage runs transactions on the store an audit log lives in: what the
// checkpointer needs of a backend.
type Storage interface {
	Viewer
	// Update runs fn in a write transaction and commits it durably if fn
	// returns nil.
	Update(ctx context.Context, fn func(Writer) error) error
}
