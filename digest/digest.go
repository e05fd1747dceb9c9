package digest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"sync"
)

// Domain is the prefix that separates writerd request digests from any other use of SHA-256.
const Domain = "writerd-request-v1"

// notRequest are the top-level arguments that are not part of the request:
// idempotency_key names a retry, and confirm only gates execution (a
// confirmed delete resent without it must replay, not conflict).
var notRequest = [...]string{"idempotency_key", "confirm"}

var parsers = sync.Pool{New: func() any { return new(parser) }}

// run canonicalizes in with a pooled parser. With object set, in must be
// one JSON object, and the returned members are its top-level members'
// spans in the canonical form, in canonical order.
func run(in []byte, object bool, visit Visitor, keep func(name []byte) bool) ([]byte, []span, error) {
	p := parsers.Get().(*parser)
	defer func() {
		p.in, p.visit, p.out = nil, nil, nil
		clear(p.members[:cap(p.members)]) // drop references to in
		clear(p.top[:cap(p.top)])
		parsers.Put(p)
	}()
	p.in, p.pos, p.visit, p.depth = in, 0, visit, 0
	p.out = make([]byte, 0, len(in))
	p.path, p.members, p.order, p.top = p.path[:0], p.members[:0], p.order[:0], p.top[:0]
	if err := p.parse(object); err != nil {
		return nil, nil, err
	}
	var omit []span
	if object {
		for _, m := range p.top {
			if !keep(m.name) {
				omit = append(omit, span{m.start, m.end})
			}
		}
	}
	return p.out, omit, nil
}

type span struct{ start, end int }

// Canonical returns the RFC 8785 canonical form of a JSON value. Its error
// is an *Error.
func Canonical(v []byte) ([]byte, error) {
	out, _, err := run(v, false, nil, nil)
	return out, err
}

// Args are the arguments of a tool call in canonical form: one JSON
// object, read once by ParseArgs or CanonicalArgs, which both the request
// digest and the decoding of the call's input read. The zero Args is the
// empty object.
type Args struct {
	canon []byte
	omit  []span // the top-level members the digest leaves out
}

// CanonicalArgs canonicalizes the arguments of a tool call, which must be
// one JSON object. Its error is an *Error.
func CanonicalArgs(args []byte) (Args, error) {
	return ParseArgs(args, nil)
}

// ParseValue is Canonical with a Visitor that sees every token first, and
// may refuse it: the strict parse of any one JSON value.
func ParseValue(v []byte, visit Visitor) ([]byte, error) {
	out, _, err := run(v, false, visit, nil)
	return out, err
}

// ParseArgs is CanonicalArgs with a Visitor that sees every token first,
// and may refuse it: a strict parser's rules and a schema check run in the
// same pass as the canonicalization.
func ParseArgs(args []byte, visit Visitor) (Args, error) {
	out, omit, err := run(args, true, visit, isRequest)
	if err != nil {
		return Args{}, err
	}
	return Args{canon: out, omit: omit}, nil
}

func isRequest(name []byte) bool {
	for _, n := range notRequest {
		if string(name) == n {
			return false
		}
	}
	return true
}

// Bytes returns the canonical form. The caller must not modify it.
func (a Args) Bytes() []byte {
	if a.canon == nil {
		return []byte("{}")
	}
	return a.canon
}

// Request returns the hex SHA-256 request digest of a tool call
// (docs/DESIGN.md section 4): the tool name and the canonical arguments
// object with its top-level "idempotency_key" and "confirm" members removed
// (only the top-level ones; nested members of those names stay).
//
// The members left are hashed as they lie in the canonical form, without
// canonicalizing again: a canonical object without some of its members is
// the canonical form of the object without them, since what remains keeps
// its order and its members' bytes.
func Request(tool string, args Args) string {
	h := sha256.New()
	h.Write([]byte(Domain))
	// The NUL separators are unambiguous even for a tool name holding NUL:
	// canonical JSON never holds a raw NUL byte.
	h.Write([]byte{0})
	h.Write([]byte(tool))
	h.Write([]byte{0})
	args.writeRequest(h)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// Request returns the canonical arguments without their top-level
// "idempotency_key" and "confirm" members: what the request digest is
// over, and what a write outside the store sends upstream.
func (a Args) Request() []byte {
	var b bytes.Buffer
	a.writeRequest(&b)
	return b.Bytes()
}

// writeRequest writes the canonical arguments without the members the
// digest leaves out.
func (args Args) writeRequest(h io.Writer) {
	c := args.Bytes()
	if len(args.omit) == 0 {
		h.Write(c)
	} else {
		// Write '{', the members kept, separated by ',', and '}'. Each
		// span is a member without its commas.
		from := 1 // just past '{'
		h.Write(c[:1])
		wrote := false
		for _, s := range args.omit {
			if kept := c[from:s.start]; len(kept) > 0 {
				kept = trimCommas(kept)
				if len(kept) > 0 {
					if wrote {
						h.Write([]byte{','})
					}
					h.Write(kept)
					wrote = true
				}
			}
			from = s.end
		}
		if kept := trimCommas(c[from : len(c)-1]); len(kept) > 0 {
			if wrote {
				h.Write([]byte{','})
			}
			h.Write(kept)
		}
		h.Write(c[len(c)-1:])
	}
}

// trimCommas drops the commas that separated a run of members from the
// members left out around it.
func trimCommas(b []byte) []byte {
	if len(b) > 0 && b[0] == ',' {
		b = b[1:]
	}
	if len(b) > 0 && b[len(b)-1] == ',' {
		b = b[:len(b)-1]
	}
	return b
}
