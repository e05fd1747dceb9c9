package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/writerd/writerd/digest"
)

// Limits bound the arguments of a call before any work grows with them
// (stage 2). Strings, arrays and objects are bounded by each tool's schema.
type Limits struct {
	MaxBytes int // the raw arguments, in bytes
	MaxDepth int // nesting of objects and arrays; the arguments object is depth 1
}

// DefaultLimits are the limits writerd serves with unless configured.
var DefaultLimits = Limits{MaxBytes: 128 << 10, MaxDepth: 16}

// maxSafeInteger is 2^53−1: larger integers lose precision as IEEE-754
// doubles, so two different requests could share a digest.
const maxSafeInteger = 1<<53 - 1

// parse runs stages 2 and 3: the limits, the strict parse against the
// tool's schema, the decoding into the tool's input type and the input's
// own rules. It returns the input and the arguments in canonical form (RFC
// 8785), from which the input was decoded and the request digest is
// computed: JSON Schema counts 1.0 and 1e2 as integers, and canonical form
// writes them as Go decodes integers. Every error is an *Error whose
// message names the argument by JSON Pointer and the rule it broke, and
// never a value the caller sent.
func (t *ToolInfo) parse(args []byte, lim Limits) (in any, canonical digest.Args, err error) {
	if canonical, err = t.check(args, lim); err != nil {
		return nil, canonical, err
	}
	// The check has refused everything the decoding could fail on; an
	// error here is a bug of ours, not the caller's.
	if in, err = t.decode(canonical.Bytes()); err != nil {
		return nil, canonical, Wrap(Internal, fmt.Errorf("decode checked arguments: %w", err), InternalMessage)
	}
	if v, ok := in.(Validator); ok {
		if err := v.Validate(); err != nil {
			return nil, canonical, validateError(err)
		}
	}
	return in, canonical, nil
}

// validateError passes on the rejection an input's Validate made with
// Invalid; anything else is a bug of the tool's, not the caller's.
func validateError(err error) *Error {
	var e *Error
	if errors.As(err, &e) && e.Code == InvalidInput && e.rule != "" {
		return e
	}
	return Wrap(Internal, fmt.Errorf("validate checked arguments: %w", err), InternalMessage)
}

// check is the strict parse without the decoding: the limits, then one
// pass over the arguments that checks them as JSON, enforces the depth
// limit and the rules on numbers, canonicalizes them and lays them out as
// a tape, then the schema check on the tape. What one pass refuses: not
// well-formed JSON or UTF-8, lone surrogates, duplicate members, nesting
// beyond the limit, numbers not finite, integers beyond ±(2^53−1), numbers
// that underflow to zero, anything but one object or anything after it.
// Memory grows only with the (already bounded) input.
// CheckArguments runs the strict parse of args against t's input schema
// under the default limits, as a call's stages 2 and 3 run it, and
// nothing else: its error is the *Error a call would answer (writerd
// upstream inspect checks an example with it).
func (t *ToolInfo) CheckArguments(args []byte) error {
	_, err := t.check(args, DefaultLimits)
	return err
}

func (t *ToolInfo) check(args []byte, lim Limits) (digest.Args, error) {
	if len(args) > lim.MaxBytes {
		return digest.Args{}, rejection(InputTooLarge, "max_bytes", "The arguments are larger than %d bytes.", lim.MaxBytes)
	}
	tp := tapes.Get().(*tape)
	defer tp.release()
	tp.maxDepth = lim.MaxDepth
	canonical, err := digest.ParseArgs(args, tp.visitor)
	if err != nil {
		return digest.Args{}, t.parseError(err)
	}
	c := &tp.checker
	c.tape = tp.entries
	if !c.check(t.input, 0) {
		return digest.Args{}, t.schemaError(c.errs)
	}
	return canonical, nil
}

// tape is the arguments as the schema check reads them: every value in
// document order, built by the parse's Visitor.
type tape struct {
	entries  []tapeEntry
	open     []int32 // the open objects and arrays
	arena    []byte  // the values of strings, names and numbers
	maxDepth int
	visitor  digest.Visitor // visit, bound once
	checker  checker
}

var tapes = sync.Pool{New: func() any {
	tp := new(tape)
	tp.visitor = tp.visit
	return tp
}}

func (tp *tape) release() {
	clear(tp.entries) // drop the values
	tp.entries, tp.open, tp.arena = tp.entries[:0], tp.open[:0], tp.arena[:0]
	tp.checker = checker{errs: tp.checker.errs[:0], path: tp.checker.path[:0]}
	if cap(tp.arena) > 256<<10 {
		tp.arena = nil
	}
	tapes.Put(tp)
}

// visitRefusal is a rule the Visitor found broken; parseError renders it
// with the pointer the parser gives.
type visitRefusal struct {
	code Code
	rule string
	what string // the sentence after the argument's name
}

func (r *visitRefusal) Error() string { return r.what }

func (tp *tape) visit(tok digest.Token) error {
	switch tok.Kind {
	case '}', ']':
		i := tp.open[len(tp.open)-1]
		tp.open = tp.open[:len(tp.open)-1]
		tp.entries[i].next = int32(len(tp.entries))
		return nil
	case 'k':
		tp.entries[tp.open[len(tp.open)-1]].count++
		i := len(tp.entries)
		tp.entries = append(tp.entries, tapeEntry{kind: 'k', val: tp.keep(tok.Text), next: int32(i + 1)})
		return nil
	}
	if n := len(tp.open); n > 0 {
		if parent := &tp.entries[tp.open[n-1]]; parent.kind == '[' {
			parent.count++
		}
	}
	i := len(tp.entries)
	e := tapeEntry{kind: tok.Kind, next: int32(i + 1)}
	switch tok.Kind {
	case '{', '[':
		if len(tp.open)+1 > tp.maxDepth {
			return &visitRefusal{InputTooLarge, "max_depth", fmt.Sprintf("is nested deeper than %d levels", tp.maxDepth)}
		}
		tp.open = append(tp.open, int32(i))
	case '"':
		e.val = tp.keep(tok.Text)
	case '0':
		f, err := parseNumber(tok.Text)
		if err != nil {
			return &visitRefusal{InvalidInput, "number", err.Error()}
		}
		e.val, e.f = tp.keep(tok.Text), f
	}
	tp.entries = append(tp.entries, e)
	return nil
}

// keep copies a token's text, valid only during the visit, into the arena.
func (tp *tape) keep(b []byte) []byte {
	start := len(tp.arena)
	tp.arena = append(tp.arena, b...)
	return tp.arena[start:len(tp.arena):len(tp.arena)]
}

// Invalid returns the INVALID_INPUT of an input's Validate (see Validator).
// rule is a fixed word naming the rule broken: it labels the rejection
// metric, so it must come from a small set. format is the sentence for the
// agent: it names the argument by JSON Pointer and the rule, and never
// interpolates a value the caller sent.
func Invalid(rule, format string, args ...any) *Error {
	return rejection(InvalidInput, rule, format, args...)
}

// rejection is an error of stages 2–3: INVALID_INPUT or INPUT_TOO_LARGE,
// with the rule it broke for the rejection metric.
func rejection(code Code, rule, format string, args ...any) *Error {
	e := Errorf(code, format, args...)
	e.rule = rule
	return e
}

// parseNumber reads a number and refuses one whose canonical form would not
// be exact: not finite as a double, an integer beyond ±(2^53−1), or a
// nonzero number that rounds to zero. Its error is a rule, never the
// number.
func parseNumber(lit []byte) (float64, error) {
	if len(lit) <= 15 && isDigits(lit) { // exact, and within ±(2^53−1)
		n, err := strconv.ParseInt(string(lit), 10, 64)
		if err == nil {
			return float64(n), nil
		}
	}
	raw := string(lit)
	f, err := strconv.ParseFloat(raw, 64)
	switch {
	case err != nil || math.IsInf(f, 0) || math.IsNaN(f):
		return 0, errors.New("must be a finite number")
	case f == math.Trunc(f) && math.Abs(f) > maxSafeInteger:
		return 0, errors.New("must be an integer within ±(2^53−1)")
	case f == 0 && !isZeroMantissa(raw):
		return 0, errors.New("must not be too small to represent")
	}
	return f, nil
}

// isZeroMantissa reports whether a JSON number's digits before any exponent
// are all zero, as in 0, -0.0 or 0e5.
func isZeroMantissa(raw string) bool {
	mant, _, _ := strings.Cut(strings.ToLower(raw), "e")
	return !strings.ContainsAny(mant, "123456789")
}

// parseError turns a refusal of the parse into a fixed sentence: the
// argument, named by at, and the rule.
func (t *ToolInfo) parseError(err error) *Error {
	var de *digest.Error
	if !errors.As(err, &de) {
		return Wrap(Internal, err, InternalMessage)
	}
	at := t.at(de.Pointer)
	var vr *visitRefusal
	switch {
	case errors.As(de.Err, &vr):
		return rejection(vr.code, vr.rule, "%s %s.", at, vr.what)
	case errors.Is(de.Err, digest.ErrDuplicate):
		return rejection(InvalidInput, "duplicate_member", "%s is a duplicate member: each member may appear once.", at)
	case errors.Is(de.Err, digest.ErrUTF8):
		return rejection(InvalidInput, "utf8", "%s contains invalid UTF-8.", at)
	case errors.Is(de.Err, digest.ErrSurrogate):
		return rejection(InvalidInput, "surrogate", "%s contains a lone surrogate escape.", at)
	case errors.Is(de.Err, digest.ErrTruncated):
		return rejection(InvalidInput, "syntax", "The arguments are not valid JSON: they end too early.")
	case errors.Is(de.Err, digest.ErrNotObject):
		return rejection(InvalidInput, "not_object", "The arguments must be a JSON object.")
	case errors.Is(de.Err, digest.ErrTrailing):
		return rejection(InvalidInput, "trailing_data", "The arguments must be one JSON object with nothing after it.")
	case errors.Is(de.Err, digest.ErrRange):
		return rejection(InvalidInput, "number", "%s must be a finite number.", at)
	case errors.Is(de.Err, digest.ErrDepth):
		return rejection(InputTooLarge, "max_depth", "%s is nested too deep.", at)
	default:
		return rejection(InvalidInput, "syntax", "%s is not valid JSON (syntax).", at)
	}
}

// at names an argument for a message by its JSON Pointer, cut before the
// first segment that is neither a member name the schema defines nor an
// array index: names the caller made up are not echoed.
func (t *ToolInfo) at(ptr string) string {
	var kept []string
	if ptr != "" {
		for seg := range strings.SplitSeq(ptr[1:], "/") {
			if !t.names[unescapePointer.Replace(seg)] && !isIndex(seg) {
				break
			}
			kept = append(kept, seg)
		}
	}
	if len(kept) == 0 {
		return "The arguments object"
	}
	return "Argument /" + strings.Join(kept, "/")
}

// The escapes of RFC 6901 JSON Pointer segments.
var (
	escapePointer   = strings.NewReplacer("~", "~0", "/", "~1")
	unescapePointer = strings.NewReplacer("~1", "/", "~0", "~")
)

func isIndex(seg string) bool {
	_, err := strconv.ParseUint(seg, 10, 32)
	return err == nil
}

func pointer(loc []string) string {
	var b strings.Builder
	for _, seg := range loc {
		b.WriteByte('/')
		b.WriteString(escapePointer.Replace(seg))
	}
	return b.String()
}

// schemaError turns the schema check's findings into one *Error: a broken
// size limit first (INPUT_TOO_LARGE belongs to stage 2), then an unknown
// member (a misspelt name would otherwise read as a missing one), then the
// rest in document order.
func (t *ToolInfo) schemaError(errs []schemaErr) *Error {
	if len(errs) == 0 {
		return rejection(InvalidInput, "schema", "The arguments do not match the tool's input schema.")
	}
	slices.SortStableFunc(errs, func(a, b schemaErr) int { return cmp.Compare(a.rank(), b.rank()) })
	return t.ruleError(errs[0])
}

func (e *schemaErr) rank() int {
	switch {
	case e.tooLarge():
		return 0
	case e.rule == "additionalProperties":
		return 1
	}
	return 2
}

// tooLarge reports whether the error is a size limit: INPUT_TOO_LARGE.
func (e *schemaErr) tooLarge() bool {
	switch e.rule {
	case "maxLength", "maxItems", "maxProperties":
		return true
	case "propertyNames":
		return e.nameRule == "maxLength"
	}
	return false
}

// ruleError is the catalogue of schema messages. Each names the rule and the
// schema's own limit; none quotes the instance.
func (t *ToolInfo) ruleError(e schemaErr) *Error {
	at := t.at(e.at)
	switch e.rule {
	case "additionalProperties":
		for _, p := range e.names {
			for name := range t.names {
				if strings.EqualFold(p, name) {
					return rejection(InvalidInput, "case", "%s has a member that differs from %q only by case; member names are case-sensitive (additionalProperties).", at, name)
				}
			}
		}
		return rejection(InvalidInput, e.rule, "%s has a member the tool does not define (additionalProperties).", at)
	case "required":
		return rejection(InvalidInput, e.rule, "%s lacks the required member %q (required).", at, e.names[0])
	case "type":
		if e.null {
			return rejection(InvalidInput, e.rule, "%s must not be null (type).", at)
		}
		return rejection(InvalidInput, e.rule, "%s must be of type %s (type).", at, e.want)
	case "maxLength":
		return rejection(InputTooLarge, e.rule, "%s must be at most %s characters long (maxLength).", at, e.want)
	case "maxItems":
		return rejection(InputTooLarge, e.rule, "%s must have at most %s items (maxItems).", at, e.want)
	case "maxProperties":
		return rejection(InputTooLarge, e.rule, "%s must have at most %s members (maxProperties).", at, e.want)
	case "minLength":
		return rejection(InvalidInput, e.rule, "%s must be at least %s characters long (minLength).", at, e.want)
	case "minItems":
		return rejection(InvalidInput, e.rule, "%s must have at least %s items (minItems).", at, e.want)
	case "minProperties":
		return rejection(InvalidInput, e.rule, "%s must have at least %s members (minProperties).", at, e.want)
	case "pattern":
		return rejection(InvalidInput, e.rule, "%s must match the pattern %s (pattern).", at, e.want)
	case "minimum":
		return rejection(InvalidInput, e.rule, "%s must be at least %s (minimum).", at, e.want)
	case "maximum":
		return rejection(InvalidInput, e.rule, "%s must be at most %s (maximum).", at, e.want)
	case "enum":
		return rejection(InvalidInput, e.rule, "%s must be one of the values the schema lists (enum).", at)
	case "const":
		return rejection(InvalidInput, e.rule, "%s must be the value the schema fixes (const).", at)
	case "propertyNames":
		code := InvalidInput
		if e.tooLarge() {
			code = InputTooLarge
		}
		return rejection(code, e.rule, "%s has a member name that breaks the schema's naming rule (propertyNames, %s).", at, e.nameRule)
	case "uniqueItems":
		return rejection(InvalidInput, e.rule, "%s must not repeat an item (uniqueItems).", at)
	case "not":
		return rejection(InvalidInput, e.rule, "%s matches a form the schema forbids (not).", at)
	case "false":
		return rejection(InvalidInput, "schema", "%s is not allowed by the schema.", at)
	case "anyOf", "oneOf":
		return rejection(InvalidInput, e.rule, "%s matches none of the forms the schema allows (%s).", at, e.rule)
	default:
		return rejection(InvalidInput, e.rule, "%s breaks the rule %s of the schema.", at, e.rule)
	}
}
