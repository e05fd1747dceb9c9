package pipeline

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

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

// parse runs stages 2 and 3: the limits, then the strict parse against the
// tool's schema, then the decoding into the tool's input type. It returns
// the input and the arguments in canonical form (RFC 8785), from which the
// input was decoded and the request digest is computed: JSON Schema counts
// 1.0 and 1e2 as integers, and canonical form writes them as Go decodes
// integers. Every error is an *Error whose message names the argument by
// JSON Pointer and the rule it broke, and never a value the caller sent.
func (t *Tool) parse(args []byte, lim Limits) (in any, canonical digest.Args, err error) {
	if len(args) > lim.MaxBytes {
		return nil, canonical, rejection(InputTooLarge, "max_bytes", "The arguments are larger than %d bytes.", lim.MaxBytes)
	}
	tree, err := t.scan(args, lim)
	if err != nil {
		return nil, canonical, err
	}
	if err := t.input.Validate(tree); err != nil {
		var ve *validator.ValidationError
		if !errors.As(err, &ve) {
			return nil, canonical, Wrap(Internal, err, InternalMessage)
		}
		return nil, canonical, t.schemaError(ve)
	}
	// The scan has refused everything canonicalization could fail on or
	// change the meaning of; an error here, like one from decode, is a bug
	// of ours, not the caller's.
	if canonical, err = digest.CanonicalArgs(args); err != nil {
		return nil, canonical, Wrap(Internal, fmt.Errorf("canonicalize checked arguments: %w", err), InternalMessage)
	}
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

// scan reads the arguments token by token and builds the tree the schema
// validator checks. It enforces what a schema cannot see: well-formed JSON
// and UTF-8, no lone surrogates, no duplicate members, nesting depth, finite
// numbers within ±(2^53−1) for integers, one object and nothing after it.
// Memory grows only with the (already bounded) input.
func (t *Tool) scan(args []byte, lim Limits) (map[string]any, error) {
	d := jsontext.NewDecoder(bytes.NewReader(args))
	tok, err := d.ReadToken()
	if err != nil {
		return nil, t.syntaxError(d, err)
	}
	if tok.Kind() != '{' {
		return nil, rejection(InvalidInput, "not_object", "The arguments must be a JSON object.")
	}
	v, err := t.scanValue(d, tok, lim)
	if err != nil {
		return nil, err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, rejection(InvalidInput, "trailing_data", "The arguments must be one JSON object with nothing after it.")
	}
	return v.(map[string]any), nil
}

func (t *Tool) scanValue(d *jsontext.Decoder, tok jsontext.Token, lim Limits) (any, error) {
	switch tok.Kind() {
	case '{', '[':
		if d.StackDepth() > lim.MaxDepth {
			return nil, rejection(InputTooLarge, "max_depth", "%s is nested deeper than %d levels.", t.at(string(d.StackPointer())), lim.MaxDepth)
		}
	}
	switch tok.Kind() {
	case 'n':
		return nil, nil
	case 'f', 't':
		return tok.Bool(), nil
	case '"':
		return tok.String(), nil
	case '0':
		raw := tok.String()
		if err := checkNumber(raw); err != nil {
			return nil, rejection(InvalidInput, "number", "%s %s.", t.at(string(d.StackPointer())), err.Error())
		}
		return json.Number(raw), nil
	case '{':
		obj := make(map[string]any)
		for {
			tok, err := d.ReadToken()
			if err != nil {
				return nil, t.syntaxError(d, err)
			}
			if tok.Kind() == '}' {
				return obj, nil
			}
			name := tok.String()
			if tok, err = d.ReadToken(); err != nil {
				return nil, t.syntaxError(d, err)
			}
			if obj[name], err = t.scanValue(d, tok, lim); err != nil {
				return nil, err
			}
		}
	case '[':
		arr := []any{}
		for {
			tok, err := d.ReadToken()
			if err != nil {
				return nil, t.syntaxError(d, err)
			}
			if tok.Kind() == ']' {
				return arr, nil
			}
			v, err := t.scanValue(d, tok, lim)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
	}
	return nil, rejection(InvalidInput, "syntax", "The arguments are not valid JSON.")
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

// checkNumber refuses numbers whose canonical form would not be exact: not
// finite as a double, an integer beyond ±(2^53−1), or a nonzero number that
// rounds to zero. Its error is a rule, never the number.
func checkNumber(raw string) error {
	f, err := strconv.ParseFloat(raw, 64)
	switch {
	case err != nil || math.IsInf(f, 0) || math.IsNaN(f):
		return errors.New("must be a finite number")
	case f == math.Trunc(f) && math.Abs(f) > maxSafeInteger:
		return errors.New("must be an integer within ±(2^53−1)")
	case f == 0 && !isZeroMantissa(raw):
		return errors.New("must not be too small to represent")
	}
	return nil
}

// isZeroMantissa reports whether a JSON number's digits before any exponent
// are all zero, as in 0, -0.0 or 0e5.
func isZeroMantissa(raw string) bool {
	mant, _, _ := strings.Cut(strings.ToLower(raw), "e")
	return !strings.ContainsAny(mant, "123456789")
}

// syntaxError turns a jsontext error into a fixed sentence. The library's
// own text quotes the input, so it is never passed on.
func (t *Tool) syntaxError(d *jsontext.Decoder, err error) *Error {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			return rejection(InvalidInput, "syntax", "The arguments are not valid JSON: they end too early.")
		}
		return rejection(InvalidInput, "syntax", "The arguments are not valid JSON.")
	}
	at := t.at(string(se.JSONPointer))
	switch msg := se.Err.Error(); {
	case errors.Is(se.Err, jsontext.ErrDuplicateName):
		return rejection(InvalidInput, "duplicate_member", "%s is a duplicate member: each member may appear once.", at)
	case strings.Contains(msg, "UTF-8"):
		return rejection(InvalidInput, "utf8", "%s contains invalid UTF-8.", at)
	case strings.Contains(msg, "surrogate"):
		return rejection(InvalidInput, "surrogate", "%s contains a lone surrogate escape.", at)
	case errors.Is(se.Err, io.ErrUnexpectedEOF):
		return rejection(InvalidInput, "syntax", "The arguments are not valid JSON: they end too early.")
	default:
		return rejection(InvalidInput, "syntax", "%s is not valid JSON (syntax).", at)
	}
}

// at names an argument for a message by its JSON Pointer, cut before the
// first segment that is neither a member name the schema defines nor an
// array index: names the caller made up are not echoed.
func (t *Tool) at(ptr string) string {
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

// schemaError turns the validator's findings into one *Error: a broken size
// limit first (INPUT_TOO_LARGE belongs to stage 2), then an unknown member
// (a misspelt name would otherwise read as a missing one), then the rest in
// document order.
func (t *Tool) schemaError(ve *validator.ValidationError) *Error {
	var leaves []*validator.ValidationError
	var walk func(*validator.ValidationError)
	walk = func(e *validator.ValidationError) {
		switch e.ErrorKind.(type) {
		case *kind.AnyOf, *kind.OneOf, *kind.AllOf, *kind.Not:
			leaves = append(leaves, e) // one message for the whole group
			return
		}
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(leaves) == 0 {
		return rejection(InvalidInput, "schema", "The arguments do not match the tool's input schema.")
	}
	slices.SortStableFunc(leaves, func(a, b *validator.ValidationError) int {
		return cmp.Compare(rank(a.ErrorKind), rank(b.ErrorKind))
	})
	e := t.ruleError(leaves[0])
	if e.rule == "" {
		e.rule = "schema" // a false subschema has no keyword
		if kw := leaves[0].ErrorKind.KeywordPath(); len(kw) > 0 {
			e.rule = kw[len(kw)-1]
		}
	}
	return e
}

func rank(k validator.ErrorKind) int {
	switch k.(type) {
	case *kind.MaxLength, *kind.MaxItems, *kind.MaxProperties:
		return 0
	case *kind.AdditionalProperties:
		return 1
	}
	return 2
}

// ruleError is the catalogue of schema messages. Each names the rule and the
// schema's own limit; none quotes the instance.
func (t *Tool) ruleError(e *validator.ValidationError) *Error {
	at := t.at(pointer(e.InstanceLocation))
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			for name := range t.names {
				if strings.EqualFold(p, name) {
					return rejection(InvalidInput, "case", "%s has a member that differs from %q only by case; member names are case-sensitive (additionalProperties).", at, name)
				}
			}
		}
		return Errorf(InvalidInput, "%s has a member the tool does not define (additionalProperties).", at)
	case *kind.Required:
		return Errorf(InvalidInput, "%s lacks the required member %q (required).", at, k.Missing[0])
	case *kind.Type:
		if k.Got == "null" {
			return Errorf(InvalidInput, "%s must not be null (type).", at)
		}
		return Errorf(InvalidInput, "%s must be of type %s (type).", at, strings.Join(k.Want, " or "))
	case *kind.MaxLength:
		return Errorf(InputTooLarge, "%s must be at most %d characters long (maxLength).", at, k.Want)
	case *kind.MaxItems:
		return Errorf(InputTooLarge, "%s must have at most %d items (maxItems).", at, k.Want)
	case *kind.MaxProperties:
		return Errorf(InputTooLarge, "%s must have at most %d members (maxProperties).", at, k.Want)
	case *kind.MinLength:
		return Errorf(InvalidInput, "%s must be at least %d characters long (minLength).", at, k.Want)
	case *kind.MinItems:
		return Errorf(InvalidInput, "%s must have at least %d items (minItems).", at, k.Want)
	case *kind.MinProperties:
		return Errorf(InvalidInput, "%s must have at least %d members (minProperties).", at, k.Want)
	case *kind.Pattern:
		return Errorf(InvalidInput, "%s must match the pattern %s (pattern).", at, k.Want)
	case *kind.Minimum:
		return Errorf(InvalidInput, "%s must be at least %s (minimum).", at, k.Want.RatString())
	case *kind.Maximum:
		return Errorf(InvalidInput, "%s must be at most %s (maximum).", at, k.Want.RatString())
	case *kind.Enum:
		return Errorf(InvalidInput, "%s must be one of the values the schema lists (enum).", at)
	case *kind.Const:
		return Errorf(InvalidInput, "%s must be the value the schema fixes (const).", at)
	case *kind.Format:
		return Errorf(InvalidInput, "%s must be a valid %s (format).", at, k.Want)
	case *kind.PropertyNames:
		return Errorf(InvalidInput, "%s has a member name that breaks the schema's naming rule (propertyNames).", at)
	case *kind.UniqueItems:
		return Errorf(InvalidInput, "%s must not repeat an item (uniqueItems).", at)
	case *kind.Not:
		return Errorf(InvalidInput, "%s matches a form the schema forbids (not).", at)
	case *kind.FalseSchema:
		return Errorf(InvalidInput, "%s is not allowed by the schema.", at)
	case *kind.AnyOf, *kind.OneOf:
		return Errorf(InvalidInput, "%s matches none of the forms the schema allows (%s).", at, e.ErrorKind.KeywordPath()[0])
	default:
		return Errorf(InvalidInput, "%s breaks the rule %s of the schema.", at, strings.Join(e.ErrorKind.KeywordPath(), "/"))
	}
}
