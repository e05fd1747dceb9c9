package digest

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The reasons a text has no canonical form. An *Error wraps one of them,
// or the error a Visitor returned.
var (
	ErrSyntax    = errors.New("invalid json syntax")
	ErrTruncated = errors.New("json ends too early")
	ErrUTF8      = errors.New("invalid UTF-8")
	ErrSurrogate = errors.New("lone surrogate escape")
	ErrDuplicate = errors.New("duplicate member name")
	ErrRange     = errors.New("number beyond the double range")
	ErrDepth     = errors.New("nested deeper than 10000 levels")
	ErrTrailing  = errors.New("data after the value")
	ErrNotObject = errors.New("not a json object")
)

// maxDepth is the nesting jsontext accepts, kept so that the two agree on
// every text.
const maxDepth = 10000

// Error is why a text could not be canonicalized: where, and the reason.
// Its message names the reason and the byte offset, never the text.
type Error struct {
	Offset int // byte offset in the input
	// Pointer is the RFC 6901 JSON Pointer of the value being read, or of
	// the member whose name was being read. It holds member names as sent:
	// a caller that must not echo input filters it.
	Pointer string
	Err     error // one of the Err variables, or a Visitor's error
}

func (e *Error) Error() string {
	return "digest: " + e.Err.Error() + " at offset " + strconv.Itoa(e.Offset)
}

func (e *Error) Unwrap() error { return e.Err }

// Token is one step of a text as Parse reads it, in document order.
type Token struct {
	// Kind is '{', '}', '[', ']', 'k' for a member name, '"' for a string
	// value, '0' for a number, 't', 'f' or 'n' for a literal.
	Kind byte
	// Text is, for a name or a string, its value (escapes decoded); for a
	// number, its literal as sent. It is valid only during the call, and
	// must not be modified.
	Text []byte
}

// A Visitor sees each token of a text before Parse writes it. An error
// stops the parse; Parse returns it wrapped in an *Error that says where.
type Visitor func(Token) error

// parser canonicalizes a JSON text in one pass. Members of an object are
// written in the order read and sorted when the object closes, by the
// UTF-16 code units of their names as RFC 8785 requires; a duplicate name
// is found as it is read, by binary search among the names before it.
type parser struct {
	in    []byte
	pos   int
	out   []byte
	visit Visitor
	depth int

	// path holds, for each open container, what a pointer needs: for an
	// object the member being read (an index into members, -1 before the
	// first), for an array the index of the item being read.
	path []step
	// members of all open objects, each object's a contiguous run; order
	// holds for each run its indices sorted by name.
	members []member
	order   []int32
	str     []byte // a decoded string's value
	tmp     []byte // an object's members while they are reordered

	top []member // the top-level object's members, in canonical order
}

type step struct {
	object bool
	at     int // the member's index in members, or the item's index
}

type member struct {
	name       []byte // decoded
	start, end int    // the member's "name":value in out
}

func (p *parser) fail(err error) error {
	return &Error{Offset: p.pos, Pointer: p.pointer(), Err: err}
}

// pointer renders the path as a JSON Pointer.
func (p *parser) pointer() string {
	var b strings.Builder
	for _, s := range p.path {
		b.WriteByte('/')
		if !s.object {
			b.WriteString(strconv.Itoa(s.at))
		} else if s.at >= 0 {
			b.WriteString(escapePointer.Replace(string(p.members[s.at].name)))
		}
	}
	return b.String()
}

var escapePointer = strings.NewReplacer("~", "~0", "/", "~1")

func (p *parser) emit(t Token) error {
	if p.visit == nil {
		return nil
	}
	if err := p.visit(t); err != nil {
		return p.fail(err)
	}
	return nil
}

// parse reads one whole text: a value with nothing after it but
// whitespace. With object set the value must be an object.
func (p *parser) parse(object bool) error {
	p.skipSpace()
	if object && p.pos < len(p.in) && p.in[p.pos] != '{' {
		switch p.in[p.pos] {
		case '[':
		default:
			// A scalar's own error comes first, as a token reader reports it.
			if err := p.value(); err != nil {
				return err
			}
		}
		return p.fail(ErrNotObject)
	}
	if err := p.value(); err != nil {
		return err
	}
	p.skipSpace()
	if p.pos != len(p.in) {
		return p.fail(ErrTrailing)
	}
	return nil
}

func (p *parser) skipSpace() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() error {
	if p.pos >= len(p.in) {
		return p.fail(ErrTruncated)
	}
	switch c := p.in[p.pos]; c {
	case '{':
		return p.object()
	case '[':
		return p.array()
	case '"':
		s, escaped, err := p.string()
		if err != nil {
			return err
		}
		if err := p.emit(Token{Kind: '"', Text: s}); err != nil {
			return err
		}
		p.appendString(s, escaped)
		return nil
	case 't':
		return p.literal("true", 't')
	case 'f':
		return p.literal("false", 'f')
	case 'n':
		return p.literal("null", 'n')
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return p.number()
		}
		return p.fail(ErrSyntax)
	}
}

func (p *parser) literal(lit string, kind byte) error {
	rest := p.in[p.pos:]
	if len(rest) < len(lit) {
		if string(rest) == lit[:len(rest)] {
			return p.fail(ErrTruncated)
		}
		return p.fail(ErrSyntax)
	}
	if string(rest[:len(lit)]) != lit {
		return p.fail(ErrSyntax)
	}
	if err := p.emit(Token{Kind: kind}); err != nil {
		return err
	}
	p.pos += len(lit)
	p.out = append(p.out, lit...)
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxDepth {
		return p.fail(ErrDepth)
	}
	return nil
}

func (p *parser) object() error {
	if err := p.enter(); err != nil {
		return err
	}
	if err := p.emit(Token{Kind: '{'}); err != nil {
		return err
	}
	p.pos++ // {
	p.out = append(p.out, '{')
	first := len(p.members)
	p.path = append(p.path, step{object: true, at: -1})
	sorted := true
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		return p.closeObject(first, sorted)
	}
	for {
		if p.pos >= len(p.in) {
			return p.fail(ErrTruncated)
		}
		if p.in[p.pos] != '"' {
			return p.fail(ErrSyntax)
		}
		name, escaped, err := p.string()
		if err != nil {
			return err
		}
		if escaped {
			name = slices.Clone(name) // p.str is reused by the next string
		}
		// Find the name's place among the object's names so far.
		run := p.order[first:]
		i, dup := slices.BinarySearchFunc(run, name, func(m int32, n []byte) int {
			return compareUTF16(p.members[m].name, n)
		})
		idx := len(p.members)
		p.members = append(p.members, member{name: name, start: len(p.out)})
		p.path[len(p.path)-1].at = idx
		if dup {
			return p.fail(ErrDuplicate)
		}
		if i != len(run) {
			sorted = false
		}
		p.order = slices.Insert(p.order, first+i, int32(idx))
		if err := p.emit(Token{Kind: 'k', Text: name}); err != nil {
			return err
		}
		if idx > first {
			p.out = append(p.out, ',')
			p.members[idx].start++
		}
		p.appendString(name, escaped)
		p.out = append(p.out, ':')
		p.skipSpace()
		if p.pos >= len(p.in) {
			return p.fail(ErrTruncated)
		}
		if p.in[p.pos] != ':' {
			return p.fail(ErrSyntax)
		}
		p.pos++
		p.skipSpace()
		if err := p.value(); err != nil {
			return err
		}
		p.members[idx].end = len(p.out)
		p.skipSpace()
		if p.pos >= len(p.in) {
			return p.fail(ErrTruncated)
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case '}':
			return p.closeObject(first, sorted)
		default:
			return p.fail(ErrSyntax)
		}
	}
}

// closeObject writes the members of the object that starts at first in
// name order, if they were not read in it.
func (p *parser) closeObject(first int, sorted bool) error {
	p.pos++ // }
	if !sorted {
		start := p.members[first].start
		p.tmp = append(p.tmp[:0], p.out[start:]...)
		p.out = p.out[:start]
		for j, m := range p.order[first:] {
			mm := &p.members[m]
			if j > 0 {
				p.out = append(p.out, ',')
			}
			s := len(p.out)
			p.out = append(p.out, p.tmp[mm.start-start:mm.end-start]...)
			mm.start, mm.end = s, len(p.out)
		}
	}
	p.out = append(p.out, '}')
	if p.depth == 1 {
		p.top = p.top[:0]
		for _, m := range p.order[first:] {
			p.top = append(p.top, p.members[m])
		}
	}
	p.members = p.members[:first]
	p.order = p.order[:first]
	p.path = p.path[:len(p.path)-1]
	p.depth--
	return p.emit(Token{Kind: '}'})
}

func (p *parser) array() error {
	if err := p.enter(); err != nil {
		return err
	}
	if err := p.emit(Token{Kind: '['}); err != nil {
		return err
	}
	p.pos++ // [
	p.out = append(p.out, '[')
	p.path = append(p.path, step{})
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		return p.closeArray()
	}
	for i := 0; ; i++ {
		p.path[len(p.path)-1].at = i
		if i > 0 {
			p.out = append(p.out, ',')
		}
		if err := p.value(); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.in) {
			return p.fail(ErrTruncated)
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case ']':
			return p.closeArray()
		default:
			return p.fail(ErrSyntax)
		}
	}
}

func (p *parser) closeArray() error {
	p.pos++ // ]
	p.out = append(p.out, ']')
	p.path = p.path[:len(p.path)-1]
	p.depth--
	return p.emit(Token{Kind: ']'})
}

// number reads a number and writes it as ECMAScript formats its double.
func (p *parser) number() error {
	start := p.pos
	in := p.in
	i := p.pos
	if in[i] == '-' {
		i++
	}
	integer := true
	switch {
	case i >= len(in):
		p.pos = i
		return p.fail(ErrTruncated)
	case in[i] == '0':
		i++
	case in[i] >= '1' && in[i] <= '9':
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
		}
	default:
		p.pos = i
		return p.fail(ErrSyntax)
	}
	if i < len(in) && in[i] == '.' {
		integer = false
		i++
		d := i
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
		}
		if i == d {
			p.pos = i
			if i == len(in) {
				return p.fail(ErrTruncated)
			}
			return p.fail(ErrSyntax)
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		integer = false
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		d := i
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
		}
		if i == d {
			p.pos = i
			if i == len(in) {
				return p.fail(ErrTruncated)
			}
			return p.fail(ErrSyntax)
		}
	}
	lit := in[start:i]
	if err := p.emit(Token{Kind: '0', Text: lit}); err != nil {
		return err
	}
	// An integer of up to 15 digits is exact as a double and written as sent.
	if integer && len(lit) <= 15 && !(lit[0] == '-' && lit[1] == '0') {
		p.pos = i
		p.out = append(p.out, lit...)
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		return p.fail(ErrRange)
	}
	p.pos = i
	p.out = appendNumber(p.out, f)
	return nil
}

// appendNumber writes a double as ECMAScript's Number.prototype.toString
// does (RFC 8785 section 3.2.2.3).
func appendNumber(b []byte, f float64) []byte {
	if f == 0 {
		return append(b, '0') // and -0
	}
	abs := math.Abs(f)
	if abs < 1e-6 || abs >= 1e21 {
		b = strconv.AppendFloat(b, f, 'e', -1, 64)
		// Go writes at least two exponent digits: e-07 becomes e-7.
		if n := len(b); b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
		return b
	}
	return strconv.AppendFloat(b, f, 'f', -1, 64)
}

// string reads a string and returns its value: a slice of the input if it
// holds no escape, else (escaped) of p.str.
func (p *parser) string() (_ []byte, escaped bool, _ error) {
	p.pos++ // "
	in := p.in
	start := p.pos
	i := p.pos
	for {
		// Eight bytes at a time while none is special.
		for i+8 <= len(in) {
			w := le64(in[i:])
			if hasSpecial(w) {
				break
			}
			i += 8
		}
		if i >= len(in) {
			p.pos = i
			return nil, false, p.fail(ErrTruncated)
		}
		c := in[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return in[start:i], false, nil
		case c == '\\':
			p.pos = i
			v, err := p.escaped(start, i)
			return v, true, err
		case c < 0x20:
			p.pos = i
			return nil, false, p.fail(ErrSyntax)
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				p.pos = i
				if !utf8.FullRune(in[i:]) {
					return nil, false, p.fail(ErrTruncated)
				}
				return nil, false, p.fail(ErrUTF8)
			}
			i += size
		}
	}
}

// escaped decodes a string from its first escape on into p.str. Runs of
// bytes without escapes are copied whole.
func (p *parser) escaped(start, i int) ([]byte, error) {
	in := p.in
	p.str = append(p.str[:0], in[start:i]...)
	run := i // the start of the run of bytes copied as they are
	for {
		for i+8 <= len(in) && !hasSpecial(le64(in[i:])) {
			i += 8
		}
		if i >= len(in) {
			p.pos = i
			return nil, p.fail(ErrTruncated)
		}
		c := in[i]
		switch {
		case c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\':
			i++
			continue
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				p.pos = i
				if !utf8.FullRune(in[i:]) {
					return nil, p.fail(ErrTruncated)
				}
				return nil, p.fail(ErrUTF8)
			}
			i += size
			continue
		}
		p.str = append(p.str, in[run:i]...)
		switch {
		case c == '"':
			p.pos = i + 1
			return p.str, nil
		case c < 0x20:
			p.pos = i
			return nil, p.fail(ErrSyntax)
		}
		// A backslash.
		if i+1 >= len(in) {
			p.pos = i + 1
			return nil, p.fail(ErrTruncated)
		}
		switch e := in[i+1]; e {
		case '"', '\\', '/':
			p.str = append(p.str, e)
			i += 2
		case 'b':
			p.str = append(p.str, '\b')
			i += 2
		case 'f':
			p.str = append(p.str, '\f')
			i += 2
		case 'n':
			p.str = append(p.str, '\n')
			i += 2
		case 'r':
			p.str = append(p.str, '\r')
			i += 2
		case 't':
			p.str = append(p.str, '\t')
			i += 2
		case 'u':
			r, n, err := p.unicode(i)
			if err != nil {
				return nil, err
			}
			p.str = utf8.AppendRune(p.str, r)
			i += n
		default:
			p.pos = i + 1
			return nil, p.fail(ErrSyntax)
		}
		run = i
	}
}

// unicode decodes the \uXXXX escape at i, and its low surrogate if it is a
// high one. It returns the rune and the bytes read.
func (p *parser) unicode(i int) (rune, int, error) {
	r, err := p.hex4(i + 2)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case r >= 0xdc00 && r <= 0xdfff:
		p.pos = i
		return 0, 0, p.fail(ErrSurrogate)
	case r >= 0xd800 && r <= 0xdbff:
		j := i + 6
		if j+1 >= len(p.in) {
			p.pos = j
			if j == len(p.in) || p.in[j] == '\\' {
				return 0, 0, p.fail(ErrTruncated)
			}
			return 0, 0, p.fail(ErrSurrogate)
		}
		if p.in[j] != '\\' || p.in[j+1] != 'u' {
			p.pos = i
			return 0, 0, p.fail(ErrSurrogate)
		}
		lo, err := p.hex4(j + 2)
		if err != nil {
			return 0, 0, err
		}
		if lo < 0xdc00 || lo > 0xdfff {
			p.pos = i
			return 0, 0, p.fail(ErrSurrogate)
		}
		return utf16Decode(r, lo), 12, nil
	}
	return r, 6, nil
}

func utf16Decode(hi, lo rune) rune {
	return 0x10000 + (hi-0xd800)<<10 + (lo - 0xdc00)
}

func (p *parser) hex4(i int) (rune, error) {
	var r rune
	for k := range 4 {
		if i+k >= len(p.in) {
			p.pos = i + k
			return 0, p.fail(ErrTruncated)
		}
		c := p.in[i+k]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			p.pos = i + k
			return 0, p.fail(ErrSyntax)
		}
	}
	return r, nil
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// hasSpecial reports whether any of eight bytes is below 0x20, '"', '\\'
// or not ASCII: a byte a string's fast path must stop at.
func hasSpecial(w uint64) bool {
	quote := w ^ ('"' * ones)
	back := w ^ ('\\' * ones)
	return ((w-0x20*ones)|(quote-ones)|(back-ones)|w)&highs != 0
}

// appendString writes a string value, just read, in canonical form. One
// sent without escapes has nothing to escape.
func (p *parser) appendString(s []byte, escaped bool) {
	if !escaped {
		p.out = append(p.out, '"')
		p.out = append(p.out, s...)
		p.out = append(p.out, '"')
		return
	}
	p.out = appendString(p.out, s)
}

// appendString writes a string value in canonical form: only '"', '\\' and
// control characters escaped, the short escapes where JSON has them.
func appendString(b []byte, s []byte) []byte {
	b = append(b, '"')
	start := 0
	i := 0
	for {
		for i+8 <= len(s) && !hasEscapable(le64(s[i:])) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// hasEscapable reports whether any of eight bytes is below 0x20, '"' or
// '\\'; bytes of 0x80 and more (UTF-8 beyond ASCII) pass.
func hasEscapable(w uint64) bool {
	quote := w ^ ('"' * ones)
	back := w ^ ('\\' * ones)
	return ((w-0x20*ones)|(quote-ones)|(back-ones))&^w&highs != 0
}

// compareUTF16 compares two valid UTF-8 strings by their UTF-16 code
// units: as by code point, except that a code point above U+FFFF (a
// surrogate pair) sorts before U+E000 to U+FFFF.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	if ra >= 0xe000 && rb >= 0xe000 && (ra >= 0x10000) != (rb >= 0x10000) {
		if ra >= 0x10000 {
			return -1
		}
		return 1
	}
	return int(ra) - int(rb)
}
