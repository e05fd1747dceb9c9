package auditlog

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/writerd/writerd/internal/atomicfile"
	"github.com/writerd/writerd/internal/pathless"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// The self-check. A daemon that signs a checkpoint vouches for every event
// under it, so before it signs it checks what it has not checked yet
// against what it has: the events appended since the last tree it
// verified must each hash to the leaf check stored with it, stand dense
// and in place, and build, on the stored hashes of that tree, a root that
// the stored hashes of the new tree give too; that root is what it signs.
// It also remembers, outside the database, the last checkpoint it signed
// (its state file, beside the key), so that a database rewritten and
// re-signed while it was down is refused at start-up: the log must extend
// that checkpoint. And a full pass over the whole log runs in the
// background, at a bounded rate, for what an edit before the last
// checkpoint would otherwise hide. A log that fails any of these stops
// the signing for good (until the daemon restarts): a checkpoint over an
// edited log would vouch for the edit.

// Defaults of the background pass.
const (
	// DefaultCheckRate bounds the background pass, in events a second:
	// reading and hashing 20,000 events (about 8 MB) a second keeps it
	// far from starving the writes.
	DefaultCheckRate = 20000
	// DefaultCheckEvery is how long after one background pass the next
	// starts.
	DefaultCheckEvery = 6 * time.Hour
)

// checkChunk is how many events the background pass reads a transaction,
// so that no read transaction is held long (bbolt grows its file only
// when none is).
const checkChunk = 1000

// Verified is a tree the self-check verified: its size and root.
type Verified struct {
	Size uint64
	Root tlog.Hash
}

// emptyRoot is RFC 6962's hash of the empty tree.
var emptyRoot = tlog.Hash(sha256.Sum256(nil))

// DamageError is a log that fails its self-check. Problem is the first
// problem, in the words writerd audit verify uses; Signed, if not 0, is the
// size of the checkpoint the checkpointer last signed, when the log does
// not extend it, and Size the log's size then.
type DamageError struct {
	Problem Problem
	Signed  uint64
	Size    uint64
}

// Forked reports whether the log does not extend the checkpoint last
// signed for its origin (Signed is set): a log rolled back, rewritten, or
// one of two copies of a log served under one key.
func (e *DamageError) Forked() bool { return e.Signed > 0 }

// Error is one sentence naming the first bad event. A log that does not
// extend the checkpoint last signed for its origin says what it may be:
// the record of that checkpoint is one per origin (per key), so a copy of
// a store served beside its original, under the same key, advances it,
// and the original is then behind it.
func (e *DamageError) Error() string {
	p := e.Problem
	detail := lowerFirst(strings.TrimSuffix(p.Detail, "."))
	if e.Signed > 0 {
		s := fmt.Sprintf("the audit log is not an extension of the checkpoint writerd last signed (size %d): %s; ", e.Signed, detail)
		if e.Size < e.Signed {
			return s + "this store's log is behind the checkpoint signed last for its origin: it is a fork of one log under one key (a backup or copy served beside its original, which signed past it?), a backup put in place without writerd restore, or a log cut short"
		}
		return s + "this store's log is not the one that checkpoint signed: it was edited or rewritten, or it is a fork of one log under one key (a backup or copy served beside its original?)"
	}
	where := fmt.Sprintf("event %d", p.Seq)
	if p.Last != 0 {
		where = fmt.Sprintf("events %d to %d", p.Seq, p.Last)
	}
	return fmt.Sprintf("the audit log fails its check at %s: %s", where, detail)
}

func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[n:]
}

// upTo is the stream s stopped after the event of sequence number to.
func upTo(s Stream, to uint64) Stream {
	return func(yield func(seq uint64, canonical []byte, leafCheck []byte) bool) error {
		return s(func(seq uint64, canonical []byte, leafCheck []byte) bool {
			if seq > to {
				return false
			}
			return yield(seq, canonical, leafCheck)
		})
	}
}

// verifySince verifies the tree of size to in r on the verified tree
// base (to >= base.Size): the log is not shorter than base, its stored
// hashes of base give base's root, the events after it verify (in, with
// its Prefix and Events set here, may add checkpoints to check) and
// build the root that the stored hashes of to give. A problem it finds is
// in its own words; explain puts it in verify's. signed is true when the
// log does not extend base itself.
func verifySince(r Reader, base Verified, to uint64, in Input) (root tlog.Hash, p *Problem, signed bool, err error) {
	size, err := r.Size()
	if err != nil {
		return root, nil, false, err
	}
	if size < base.Size {
		return root, &Problem{Seq: size + 1, Last: base.Size, Kind: ProblemNotExtension,
			Detail: fmt.Sprintf("The log ends at event %d, before the %d events it held: events %d to %d are missing.", size, base.Size, size+1, base.Size)}, true, nil
	}
	notExtension := &Problem{Seq: 1, Last: base.Size, Kind: ProblemNotExtension,
		Detail: fmt.Sprintf("Its first %d events have another root than that checkpoint signed: an event from 1 to %d was changed, or the log was rewritten.", base.Size, base.Size)}
	prefix, err := PrefixOf(r, base.Size)
	if err != nil {
		return root, notExtension, true, nil // its hashes are gone
	}
	if base.Size > 0 {
		if _, err := r.Leaf(base.Size); err != nil {
			return root, notExtension, true, nil
		}
	}
	if f, err := prefixFrontier(prefix); err != nil || f.root() != base.Root {
		return root, notExtension, true, nil
	}
	if to == base.Size && len(in.Checkpoints) == 0 && len(in.Against) == 0 {
		return base.Root, nil, false, nil
	}
	in.Prefix, in.Events = prefix, upTo(r.Leaves(base.Size+1), to)
	v, err := Verify(in)
	if err != nil {
		return root, nil, false, err
	}
	if !v.OK() {
		return root, first(v), false, nil
	}
	if v.Events < to {
		return root, &Problem{Seq: v.Events + 1, Last: to, Kind: ProblemMissing,
			Detail: fmt.Sprintf("Events %d to %d are missing: the log's size is %d, but its events end at %d.", v.Events+1, to, size, v.Events)}, false, nil
	}
	stored, err := TreeHash(r, to)
	if err != nil || stored != v.Root {
		return root, &Problem{Seq: base.Size + 1, Last: to, Kind: ProblemEdited,
			Detail: fmt.Sprintf("The tree hashes stored for the first %d events are not those of its events: an event from %d to %d, or a stored hash, was changed.", to, base.Size+1, to)}, false, nil
	}
	return v.Root, nil, false, nil
}

// first returns the problem of v at the smallest sequence number.
func first(v *Verification) *Problem {
	best := -1
	for i, p := range v.Problems {
		if p.Seq == 0 {
			continue
		}
		if best < 0 || p.Seq < v.Problems[best].Seq {
			best = i
		}
	}
	if best < 0 {
		best = 0
	}
	p := v.Problems[best]
	return &p
}

// explain verifies the whole log in r as writerd audit verify --against
// the remembered checkpoint does, and returns its first problem, or
// fallback if it finds none (a stored hash changed, which verify does not
// read). key nil checks no checkpoint. signed, if not 0, is the size of
// the checkpoint last signed, which the checks found the log does not
// extend.
func explain(r Reader, key note.Verifier, remembered []byte, fallback *Problem, signed uint64) (*DamageError, error) {
	in := Input{Key: key, Events: r.Leaves(1)}
	if key != nil {
		cps, err := r.Checkpoints()
		if err != nil {
			return nil, err
		}
		in.Checkpoints = cps
		if remembered != nil {
			in.Against = [][]byte{remembered}
		}
	}
	v, err := Verify(in)
	if err != nil {
		return nil, err
	}
	size, err := r.Size()
	if err != nil {
		return nil, err
	}
	if v.OK() {
		return &DamageError{Problem: *fallback, Signed: signed, Size: size}, nil
	}
	p := first(v)
	d := &DamageError{Problem: *p, Signed: signed, Size: size}
	if p.Kind == ProblemNotExtension && remembered != nil {
		if c, err := ParseSigned(remembered); err == nil {
			d.Signed = c.Size
		}
	}
	return d, nil
}

// LogCheck is the full pass over a log: the background pass of a
// checkpointer, and writerd check's.
type LogCheck struct {
	// Key checks the checkpoints; nil checks none (the events and the
	// stored hashes still are).
	Key note.Verifier
	// Remembered is the checkpoint the checkpointer last signed (its
	// state file), which the log must extend; nil for none.
	Remembered []byte
	// Rate bounds the pass, in events a second; 0: as fast as it reads.
	Rate int
	// Progress, if set, is told of each tree verified.
	Progress func(size uint64)
}

// Run verifies the whole log that v reads, as it is when Run starts: each
// event against its leaf check, dense and in place, every checkpoint
// (with Key) and the remembered one against the roots, and the stored
// hashes against the events. It reads checkChunk events a transaction. It
// returns the size verified and, if the log fails, its first problem in
// verify's words.
func (lc LogCheck) Run(ctx context.Context, v Viewer) (uint64, *DamageError, error) {
	var size uint64
	var cps [][]byte
	err := v.View(ctx, func(r Reader) error {
		var err error
		if size, err = r.Size(); err != nil {
			return err
		}
		if lc.Key != nil {
			cps, err = r.Checkpoints()
		}
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	// Each checkpoint is checked in the chunk that reaches its size; one
	// past the log, in the last (the log is then short of it).
	type sized struct {
		size   uint64
		signed []byte
	}
	var all []sized
	for _, s := range cps {
		c, err := ParseSigned(s)
		if err != nil {
			c.Size = 1 // checked, and refused, with the first chunk
		}
		all = append(all, sized{c.Size, s})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].size < all[j].size })
	var remembered uint64
	if lc.Key != nil && lc.Remembered != nil {
		c, err := ParseSigned(lc.Remembered)
		if err != nil {
			return 0, nil, fmt.Errorf("auditlog: the remembered checkpoint: %w", err)
		}
		remembered = max(c.Size, 1)
		// First what the daemon checks at start-up: the log extends it,
		// by its stored hashes.
		var damage *DamageError
		err = v.View(ctx, func(r Reader) error {
			_, p, signed, err := verifySince(r, Verified{c.Size, c.Root}, c.Size, Input{})
			if err != nil || p == nil || !signed {
				return err
			}
			damage, err = explain(r, lc.Key, lc.Remembered, p, c.Size)
			return err
		})
		if err != nil || damage != nil {
			return 0, damage, err
		}
	}

	base := Verified{Root: emptyRoot}
	start := time.Now()
	for from := uint64(1); from <= max(size, 1); from += checkChunk {
		to := min(from+checkChunk-1, size)
		last := to == size
		in := Input{Key: lc.Key}
		for len(all) > 0 && (all[0].size <= to || last) {
			in.Checkpoints = append(in.Checkpoints, all[0].signed)
			all = all[1:]
		}
		if remembered != 0 && (remembered <= to || last) {
			in.Against = [][]byte{lc.Remembered}
			remembered = 0
		}
		var damage *DamageError
		err := v.View(ctx, func(r Reader) error {
			root, p, _, err := verifySince(r, base, to, in)
			switch {
			case err != nil:
				return err
			case p != nil:
				// A chunk names a problem only from its own start; the
				// whole log, verified as verify does, names it from the
				// first event it could be.
				damage, err = explain(r, lc.Key, lc.Remembered, p, 0)
				return err
			}
			base = Verified{to, root}
			return nil
		})
		if err != nil || damage != nil {
			return to, damage, err
		}
		if lc.Progress != nil {
			lc.Progress(to)
		}
		if lc.Rate > 0 {
			due := time.Duration(float64(to) / float64(lc.Rate) * float64(time.Second))
			if err := sleep(ctx, due-time.Since(start)); err != nil {
				return to, nil, err
			}
		}
		if size == 0 {
			break
		}
	}
	return size, nil, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ReadState reads the checkpoint a checkpointer last signed from its state
// file (StatePath): nil if there is none. A file that does not verify
// with the log's key is an error of one sentence.
func ReadState(path string, v note.Verifier) ([]byte, *Checkpoint, error) {
	if path == "" {
		return nil, nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, &StateError{fmt.Errorf("cannot read the checkpoint writerd last signed, kept in %s: %w", path, pathless.Error(err))}
	}
	c, err := OpenCheckpoint(b, v)
	if err != nil {
		return nil, nil, &StateError{fmt.Errorf("the checkpoint writerd last signed, kept in %s, is not one of this log's (%v); if the log's key was replaced on purpose, remove that file", path, err)}
	}
	return b, &c, nil
}

// StateError is a state file that cannot be read or is not the log's.
type StateError struct{ err error }

func (e *StateError) Error() string { return e.err.Error() }
func (e *StateError) Unwrap() error { return e.err }

// writeState replaces the state file with signed, atomically: a new file
// written and synced, renamed over the old one, and the directory synced.
func writeState(path string, signed []byte) error {
	// The key directory, for a key still in the data directory.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, signed, 0o600)
}
