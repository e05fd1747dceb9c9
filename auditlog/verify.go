package auditlog

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/bits"
	"slices"
	"strconv"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Kinds of Problem.
const (
	ProblemEdited       = "edited"        // an event's bytes are not those its tree hash or a checkpoint was made of
	ProblemMissing      = "missing"       // a sequence number has no event
	ProblemReordered    = "reordered"     // an event stands under another's sequence number
	ProblemMalformed    = "malformed"     // an event is not one canonical JSON event
	ProblemBadSignature = "bad_signature" // a checkpoint's signature does not verify with the log's key
	ProblemNotExtension = "not_extension" // the log does not extend a checkpoint
	ProblemUnwitnessed  = "unwitnessed"   // no checkpoint carries the quorum of witness cosignatures asked for
)

// Problem is one thing wrong with a log, at the first sequence number it
// concerns. Where the tree's roots only bound the change (a checkpoint
// whose root does not match, after a rewrite that left no stored leaf
// check behind), the problem is a range: Seq is its first sequence number
// and Last its last; the first event changed lies in it. Seq is never
// later than the first event changed.
type Problem struct {
	Seq    uint64 // the first bad sequence number, or the range's first
	Last   uint64 // the range's last sequence number; 0: Seq alone
	Kind   string // one of the Problem kinds
	Detail string // a sentence
}

// Verification is what Verify found.
type Verification struct {
	Events      uint64    // the size of the tree verified
	Checkpoints int       // the log's checkpoints whose signature and root verified
	Root        tlog.Hash // the root of the tree of every event read
	// Pinned is the largest saved checkpoint (Input.Against) the log
	// extends, 0 if none; Witnessed the largest of the log's checkpoints
	// carrying the quorum of cosignatures whose root matched, 0 if none.
	// A verification rests on them, else on the log's key alone.
	Pinned, Witnessed uint64
	Problems          []Problem
}

// OK reports whether the log verified.
func (v *Verification) OK() bool { return len(v.Problems) == 0 }

// A Stream yields a log's events in the order it holds them: each event's
// sequence number as stored, its canonical bytes, and, where the store
// keeps it, the start of the leaf hash written when it was appended (nil
// otherwise), by which an edited event is named.
// It stops early if yield returns false, and returns the error that ended
// it, if any.
type Stream func(yield func(seq uint64, canonical []byte, leafCheck []byte) bool) error

// Input is what Verify checks.
type Input struct {
	Key         note.Verifier // the log's verifier key
	Checkpoints [][]byte      // the log's signed checkpoints
	// Against are checkpoints the auditor saved earlier, which the log
	// must extend.
	Against [][]byte
	// Witnesses are the verifiers of the witnesses the auditor trusts
	// (c2sp.org/tlog-cosignature), and Quorum how many of them must have
	// cosigned a checkpoint of the log for Verify to trust it as it trusts
	// a saved one. Quorum 0 asks for none.
	Witnesses []note.Verifier
	Quorum    int
	// Prefix is the tree before the first event streamed: empty for a
	// whole log; an export of a range carries it.
	Prefix Prefix
	Events Stream
}

// Prefix is a tree of Size leaves known only by the roots of its perfect
// subtrees, largest first (RFC 6962 splits a tree of any size into them):
// all that is needed to go on adding leaves and computing roots.
type Prefix struct {
	Size   uint64      `json:"size"`
	Hashes []tlog.Hash `json:"hashes"`
}

// CosignedBy reports, by index, which of witnesses have a cosignature on
// the signed note that verifies with their key. Each is checked on its
// own: a note.Open over all of them fails outright on one bad
// cosignature, which must cost only its own.
func CosignedBy(signed []byte, witnesses []note.Verifier) []bool {
	out := make([]bool, len(witnesses))
	for i, w := range witnesses {
		_, err := note.Open(signed, note.VerifierList(w))
		out[i] = err == nil
	}
	return out
}

// cosigners counts the witnesses that cosigned the note.
func cosigners(signed []byte, witnesses []note.Verifier) int {
	n := 0
	for _, ok := range CosignedBy(signed, witnesses) {
		if ok {
			n++
		}
	}
	return n
}

// Verify recomputes a log's Merkle tree from its events alone and checks
// it against the log's signed checkpoints and, if given, checkpoints the
// auditor saved earlier: every signature must verify with the key, the
// events must be dense from 1 (or from the prefix), each in its place and
// canonical, and the tree of each checkpoint's size must have its root. It
// names the first bad sequence number of each problem.
//
// Where only a root shows a change, the problem's range starts after the
// largest checkpoint the auditor trusts that matched (a saved one, or one
// with the witnesses' quorum), never after one of the log's own: whoever
// holds the key can re-sign those over a rewritten log.
//
// It keeps only the right edge of the tree in memory (O(log n)).
func Verify(in Input) (*Verification, error) {
	v := &Verification{}
	type signed struct {
		c       Checkpoint
		saved   bool // the auditor's, not the log's
		trusted bool // saved, or cosigned by the witnesses' quorum
	}
	var want []signed
	for _, s := range in.Checkpoints {
		c, err := OpenCheckpoint(s, in.Key)
		if err != nil {
			size := uint64(0)
			if pc, perr := ParseCheckpoint(textOf(s)); perr == nil {
				size = pc.Size
			}
			v.problem(size, 0, ProblemBadSignature, "The checkpoint of size %d does not verify with the log's key: %v.", size, err)
			continue
		}
		want = append(want, signed{c: c, trusted: in.Quorum > 0 && cosigners(s, in.Witnesses) >= in.Quorum})
	}
	for _, s := range in.Against {
		c, err := OpenCheckpoint(s, in.Key)
		if err != nil {
			v.problem(0, 0, ProblemNotExtension, "The saved checkpoint is not one of this log's: %v.", err)
			continue
		}
		want = append(want, signed{c: c, saved: true, trusted: true})
	}
	slices.SortStableFunc(want, func(a, b signed) int { return cmpUint(a.c.Size, b.c.Size) })
	if in.Quorum > 0 && !slices.ContainsFunc(want, func(s signed) bool { return s.trusted && !s.saved }) {
		v.problem(0, 0, ProblemUnwitnessed, "No checkpoint of the log carries cosignatures of %d of the %d witnesses given.", in.Quorum, len(in.Witnesses))
	}

	edge, err := prefixFrontier(in.Prefix)
	if err != nil {
		return nil, err
	}
	var (
		next   = in.Prefix.Size + 1
		broken bool // a structural problem: later roots cannot match
		// The largest size a trusted checkpoint's root matched; the
		// prefix's events are not in the input, so a problem is at the
		// first event after it.
		trusted = in.Prefix.Size
	)
	// Checkpoints within the prefix cannot be checked against events.
	for len(want) > 0 && want[0].c.Size < in.Prefix.Size {
		want = want[1:]
	}
	check := func() {
		for len(want) > 0 && want[0].c.Size == next-1 {
			c := want[0]
			want = want[1:]
			if edge.root() == c.c.Root {
				switch {
				case c.saved:
					v.Pinned = c.c.Size
				case c.trusted:
					v.Witnessed = c.c.Size
				}
				if !c.saved {
					v.Checkpoints++
				}
				if c.trusted {
					trusted = c.c.Size
				}
				continue
			}
			if broken {
				continue // the earlier problem explains it
			}
			first, last := trusted+1, c.c.Size
			which := "the checkpoint"
			if c.saved {
				which = "the saved checkpoint"
			}
			kind := ProblemEdited
			if c.saved {
				kind = ProblemNotExtension
			}
			v.problem(first, last, kind, "The first %d events do not hash to the root %s of size %d signed: %s was changed.", c.c.Size, which, c.c.Size, changed(first, last))
			broken = true
		}
	}
	check() // a checkpoint of the empty tree
	err = in.Events(func(seq uint64, canonical []byte, leafCheck []byte) bool {
		switch {
		case broken:
		case seq > next:
			v.problem(next, 0, ProblemMissing, "Event %d is missing: the next one stored is %d.", next, seq)
			broken = true
		case seq < next:
			v.problem(seq, 0, ProblemReordered, "Event %d is stored out of order, after event %d.", seq, next-1)
			broken = true
		}
		if broken {
			return true
		}
		if held, ok := seqOf(canonical); !ok {
			v.problem(seq, 0, ProblemMalformed, "Event %d is not an audit event in canonical JSON.", seq)
			broken = true
			return true
		} else if held != seq {
			v.problem(seq, 0, ProblemReordered, "Event %d holds the event of sequence number %d: events were moved.", seq, held)
			broken = true
			return true
		}
		h := tlog.RecordHash(canonical)
		if leafCheck != nil && !bytes.HasPrefix(h[:], leafCheck) {
			v.problem(seq, 0, ProblemEdited, "Event %d was changed after it was appended: its bytes no longer hash to its leaf.", seq)
			broken = true
			return true
		}
		edge.push(h)
		next++
		check()
		return true
	})
	if err != nil {
		return v, err
	}
	v.Root = edge.root()
	count := next - 1
	v.Events = count
	for _, c := range want {
		if broken {
			break
		}
		kind := ProblemMissing
		if c.saved {
			kind = ProblemNotExtension
		}
		v.problem(count+1, c.c.Size, kind, "The log ends at event %d, but a checkpoint signs %d events: events %d to %d are missing.", count, c.c.Size, count+1, c.c.Size)
		break
	}
	return v, nil
}

// changed says which event was changed, for a problem from first to last.
func changed(first, last uint64) string {
	if first == last {
		return fmt.Sprintf("event %d", first)
	}
	return fmt.Sprintf("an event from %d to %d", first, last)
}

func (v *Verification) problem(seq, last uint64, kind, format string, args ...any) {
	if last == seq {
		last = 0
	}
	v.Problems = append(v.Problems, Problem{Seq: seq, Last: last, Kind: kind, Detail: fmt.Sprintf(format, args...)})
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// textOf returns a signed note's text, for the size of a checkpoint whose
// signature failed.
func textOf(signed []byte) string {
	if i := bytes.Index(signed, []byte("\n\n")); i >= 0 {
		return string(signed[:i+1])
	}
	return string(signed)
}

// seqOf reads the "seq" member of an event's canonical JSON without
// decoding the rest. In canonical form a quote inside a string is always
// escaped, so the member's name cannot be mistaken for string content.
func seqOf(canonical []byte) (uint64, bool) {
	i := bytes.Index(canonical, []byte(`"seq":`))
	if i < 0 {
		return 0, false
	}
	rest := canonical[i+len(`"seq":`):]
	j := bytes.IndexAny(rest, ",}")
	if j <= 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(rest[:j]), 10, 64)
	return n, err == nil
}

// prefixFrontier is the frontier of a prefix, checked against its size.
func prefixFrontier(p Prefix) (frontier, error) {
	var f frontier
	left := p.Size
	for _, h := range p.Hashes {
		if left == 0 {
			return f, fmt.Errorf("auditlog: a prefix of %d leaves has more than %d subtrees", p.Size, len(f.hashes))
		}
		size := uint64(1) << (63 - bitsLeadingZeros(left))
		f.hashes, f.sizes = append(f.hashes, h), append(f.sizes, size)
		left -= size
	}
	if left != 0 {
		return f, fmt.Errorf("auditlog: a prefix of %d leaves lacks subtree hashes", p.Size)
	}
	return f, nil
}

// frontier is the right edge of a Merkle tree being built leaf by leaf:
// the roots of its perfect subtrees, largest first, with their sizes.
type frontier struct {
	hashes []tlog.Hash
	sizes  []uint64
}

func (f *frontier) push(h tlog.Hash) {
	f.hashes, f.sizes = append(f.hashes, h), append(f.sizes, 1)
	for n := len(f.sizes); n >= 2 && f.sizes[n-1] == f.sizes[n-2]; n = len(f.sizes) {
		f.hashes[n-2] = tlog.NodeHash(f.hashes[n-2], f.hashes[n-1])
		f.sizes[n-2] *= 2
		f.hashes, f.sizes = f.hashes[:n-1], f.sizes[:n-1]
	}
}

// root is RFC 6962's hash of the tree: the subtrees folded from the right.
func (f *frontier) root() tlog.Hash {
	if len(f.hashes) == 0 {
		return sha256.Sum256(nil) // RFC 6962: the hash of the empty tree
	}
	h := f.hashes[len(f.hashes)-1]
	for i := len(f.hashes) - 2; i >= 0; i-- {
		h = tlog.NodeHash(f.hashes[i], h)
	}
	return h
}

func bitsLeadingZeros(x uint64) int { return bits.LeadingZeros64(x) }
