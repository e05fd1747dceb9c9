package auditapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/auditlog"
)

// Source is where an auditor reads a log: a store (Local) or a daemon's
// audit API (Client). Both answer every call alike.
type Source interface {
	// List returns up to limit events that pass f, in sequence order,
	// after the sequence number after, and the cursor to go on from, 0 if
	// no more follow.
	List(ctx context.Context, f auditlog.Filter, after uint64, limit int) ([]*auditlog.Event, uint64, error)
	// Size returns the number of events in the log.
	Size(ctx context.Context) (uint64, error)
	// Event returns the event named by ref (a sequence number or a ULID),
	// ErrNoEvent if there is none, with its inclusion proof in the tree of
	// the latest checkpoint if that covers it.
	Event(ctx context.Context, ref string) (*ProvenEvent, error)
	// Checkpoint returns the latest signed checkpoint, ErrNoCheckpoint if
	// there is none yet.
	Checkpoint(ctx context.Context) ([]byte, error)
	// Checkpoints returns every signed checkpoint, smallest tree first.
	Checkpoints(ctx context.Context) ([][]byte, error)
	// Events streams the events for auditlog.Verify: every event of a
	// store; through the latest checkpoint from a daemon.
	Events(ctx context.Context) (auditlog.Stream, error)
	// Export writes an export from the event from through the latest
	// checkpoint, with verifierKey in its header (ErrNoCheckpoint if none).
	Export(ctx context.Context, from uint64, w io.Writer, verifierKey string) error
}

// ProvenEvent is an event, its canonical bytes (the leaf of the tree), and
// the latest checkpoint with the event's inclusion proof in its tree.
type ProvenEvent struct {
	Event     *auditlog.Event
	Canonical []byte
	// Checkpoint is the latest signed checkpoint, nil if none was signed.
	Checkpoint []byte
	// Proof proves the event in the tree of the checkpoint's size; nil if
	// the checkpoint does not cover it (or there is none).
	Proof *Proof
}

// Errors both sources answer with, each a sentence for the auditor.
var (
	// ErrNoCheckpoint wraps auditlog.ErrNoCheckpoint, so that errors.Is
	// matches either sentinel wherever one is checked (Server.answer
	// among them); its message adds when the daemon signs one.
	ErrNoCheckpoint = fmt.Errorf("%w: the daemon signs one every --checkpoint-every events, every --checkpoint-interval while events come, and when it stops", auditlog.ErrNoCheckpoint)
	ErrNoEvent      = errors.New("the audit log has no such event")
	// ErrUnreachable is wrapped by a Client's errors when the daemon does
	// not answer.
	ErrUnreachable = errors.New("cannot reach the daemon")
)

// pastCheckpoint is Export's refusal of a from after the latest checkpoint.
func pastCheckpoint(from, size uint64) error {
	return fmt.Errorf("--from %d is past the latest checkpoint, which signs events 1 to %d; an export ends at a checkpoint", from, size)
}

// ParseRef reads an event's name: a sequence number or a ULID.
func ParseRef(ref string) (seq uint64, id string, ok bool) {
	if n, err := strconv.ParseUint(ref, 10, 64); err == nil && n > 0 && strconv.FormatUint(n, 10) == ref {
		return n, "", true
	}
	if _, err := ulid.ParseStrict(ref); err == nil {
		return 0, ref, true
	}
	return 0, "", false
}

// Local reads a log from its store, through auditlog's read seam: the
// source of writerd audit --data, and what Server answers from.
type Local struct {
	Log auditlog.Viewer
}

var _ Source = Local{}

func (l Local) List(ctx context.Context, f auditlog.Filter, after uint64, limit int) (events []*auditlog.Event, next uint64, err error) {
	err = l.Log.View(ctx, func(r auditlog.Reader) error {
		events, next, err = auditlog.List(r, f, after, limit)
		return err
	})
	return events, next, err
}

func (l Local) Size(ctx context.Context) (size uint64, err error) {
	err = l.Log.View(ctx, func(r auditlog.Reader) error {
		size, err = r.Size()
		return err
	})
	return size, err
}

func (l Local) Event(ctx context.Context, ref string) (*ProvenEvent, error) {
	seq, id, ok := ParseRef(ref)
	if !ok {
		return nil, ErrNoEvent
	}
	return l.proven(ctx, seq, id)
}

// proven returns the event of id, or if id is "" of sequence number seq,
// with its proof.
func (l Local) proven(ctx context.Context, seq uint64, id string) (*ProvenEvent, error) {
	p := new(ProvenEvent)
	err := l.Log.View(ctx, func(r auditlog.Reader) error {
		var err error
		if id != "" {
			p.Event, err = auditlog.ByID(r, id)
		} else {
			p.Event, err = auditlog.Get(r, seq)
		}
		if errors.Is(err, auditlog.ErrNotFound) {
			return ErrNoEvent
		}
		if err != nil {
			return err
		}
		// The leaf as stored, the bytes the tree holds, which the server
		// sends beside the event, so that a client hashes them and not
		// its own encoding of the event.
		leaf, err := r.Leaf(p.Event.Seq)
		if err != nil {
			return err
		}
		p.Canonical = bytes.Clone(leaf)
		size, signed, err := r.LatestCheckpoint()
		if errors.Is(err, auditlog.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		p.Checkpoint = signed
		if p.Event.Seq > size {
			return nil
		}
		c, err := auditlog.ParseSigned(signed)
		if err != nil {
			return fmt.Errorf("the latest checkpoint: %w", err)
		}
		hashes, err := auditlog.InclusionProof(r, size, p.Event.Seq)
		if err != nil {
			return fmt.Errorf("the inclusion proof of event %d cannot be made: %w", p.Event.Seq, err)
		}
		p.Proof = &Proof{Size: size, Root: c.Root, Hashes: hashes}
		return nil
	})
	return p, err
}

func (l Local) Checkpoint(ctx context.Context) (signed []byte, err error) {
	err = l.Log.View(ctx, func(r auditlog.Reader) error {
		_, signed, err = r.LatestCheckpoint()
		if errors.Is(err, auditlog.ErrNotFound) {
			return ErrNoCheckpoint
		}
		return err
	})
	return signed, err
}

func (l Local) Checkpoints(ctx context.Context) (all [][]byte, err error) {
	err = l.Log.View(ctx, func(r auditlog.Reader) error {
		all, err = r.Checkpoints()
		return err
	})
	return all, err
}

// Events streams every event stored, in one read transaction when the
// stream runs; a store that cannot be read fails here, before it does.
func (l Local) Events(ctx context.Context) (auditlog.Stream, error) {
	if err := l.Log.View(ctx, func(auditlog.Reader) error { return nil }); err != nil {
		return nil, err
	}
	return func(yield func(uint64, []byte, []byte) bool) error {
		return l.Log.View(ctx, func(r auditlog.Reader) error { return r.Leaves(1)(yield) })
	}, nil
}

func (l Local) Export(ctx context.Context, from uint64, w io.Writer, verifierKey string) error {
	return l.Log.View(ctx, func(r auditlog.Reader) error {
		size, _, err := r.LatestCheckpoint()
		if errors.Is(err, auditlog.ErrNotFound) {
			return ErrNoCheckpoint
		}
		if err != nil {
			return err
		}
		if from > size+1 {
			return pastCheckpoint(from, size)
		}
		return auditlog.Export(r, w, from, verifierKey)
	})
}
