package auditapi

import (
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
)

// The protocol's paths, below the daemon's base URL. Every one is a GET.
const (
	pathEvents      = "/v1/audit/events"            // ?since, until, tool, principal, outcome, code, key, target, request_id, limit, after: a Page
	pathEvent       = "/v1/audit/events/"           // + a sequence number or a ULID: an EventAnswer
	pathCheckpoint  = "/v1/audit/checkpoint"        // the latest signed checkpoint, as its note (text)
	pathCheckpoints = "/v1/audit/checkpoints"       // every signed checkpoint: a CheckpointList
	pathConsistency = "/v1/audit/proof/consistency" // ?old, new: a Consistency
	pathKey         = "/v1/audit/key"               // the verifier key (text)
	pathExport      = "/v1/audit/export"            // ?from: an export (JSON Lines)
)

// Bounds of a page of the event list.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Page is one page of the event list: the events in sequence order, and
// the cursor of the next page (the after parameter) if more may follow.
type Page struct {
	Events []*auditlog.Event `json:"events"`
	Next   string            `json:"next,omitempty"`
}

// Proof is an inclusion proof of an event in a signed tree: the tree's
// size and root, and the hashes tlog.CheckRecord takes.
type Proof struct {
	Size   uint64      `json:"size"`
	Root   tlog.Hash   `json:"root"`
	Hashes []tlog.Hash `json:"hashes"`
}

// EventAnswer is one event, the leaf the tree holds of it (its stored
// canonical JSON, base64 on the wire: a client hashes these bytes, not its
// own encoding of Event), and its inclusion proof in the tree of the
// latest checkpoint if that covers it.
type EventAnswer struct {
	Event *auditlog.Event `json:"event"`
	Leaf  []byte          `json:"leaf"`
	Proof *Proof          `json:"proof,omitempty"`
}

// CheckpointList is every signed checkpoint, smallest tree first, each
// as its note.
type CheckpointList struct {
	Checkpoints []string `json:"checkpoints"`
}

// Consistency proves that the tree of size New extends the tree of size
// Old (tlog.CheckTree). Its members are in the order the API has always
// written them.
type Consistency struct {
	Hashes tlog.TreeProof `json:"hashes"`
	New    uint64         `json:"new"`
	Old    uint64         `json:"old"`
}
