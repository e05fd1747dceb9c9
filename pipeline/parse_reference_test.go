package pipeline

// The strict parse as it was before it had a schema checker of its own:
// a jsontext token scan that builds a tree, then santhosh-tekuri/jsonschema
// on the tree. Kept as the reference the differential fuzz tests hold the
// parse to (validate_fuzz_test.go).

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// referenceSchemas caches each tool's input schema compiled for the
// reference validator.
var referenceSchemas sync.Map // *ToolInfo → *validator.Schema

// referenceCheck is check as the reference decides it: the limits, the
// token scan, then the reference validator; nil if it accepts.
func (t *ToolInfo) referenceCheck(args []byte, lim Limits) error {
	s, ok := referenceSchemas.Load(t)
	if !ok {
		compiled, err := compileReference(t.Name+".input.json", t.InputSchema)
		if err != nil {
			panic(err)
		}
		s, _ = referenceSchemas.LoadOrStore(t, compiled)
	}
	if len(args) > lim.MaxBytes {
		return rejection(InputTooLarge, "max_bytes", "The arguments are larger than %d bytes.", lim.MaxBytes)
	}
	tree, err := t.refScan(args, lim)
	if err != nil {
		return err
	}
	if err := s.(*validator.Schema).Validate(tree); err != nil {
		var ve *validator.ValidationError
		if !errors.As(err, &ve) {
			return Wrap(Internal, err, InternalMessage)
		}
		return t.refSchemaError(ve)
	}
	return nil
}

// scan reads the arguments token by token and builds the tree the schema
// validator checks. It enforces what a schema cannot see: well-formed JSON
// and UTF-8, no lone surrogates, no duplicate members, nesting depth, finite
// numbers within ±(2^53−1) for integers, one object and nothing after it.
// Memory grows only with the (already bounded) input.
func (t *ToolInfo) refScan(args []byte, lim Limits) (map[string]any, error) {
	d := jsontext.NewDecoder(bytes.NewReader(args))
	tok, err := d.ReadToken()
	if err != nil {
		return nil, t.refSyntaxError(d, err)
	}
	if tok.Kind() != '{' {
		return nil, rejection(InvalidInput, "not_object", "The arguments must be a JSON object.")
	}
	v, err := t.refScanValue(d, tok, lim)
	if err != nil {
		return nil, err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, rejection(InvalidInput, "trailing_data", "The arguments must be one JSON object with nothing after it.")
	}
	return v.(map[string]any), nil
}

func (t *ToolInfo) refScanValue(d *jsontext.Decoder, tok jsontext.Token, lim Limits) (any, error) {
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
		if err := refCheckNumber(raw); err != nil {
			return nil, rejection(InvalidInput, "number", "%s %s.", t.at(string(d.StackPointer())), err.Error())
		}
		return json.Number(raw), nil
	case '{':
		obj := make(map[string]any)
		for {
			tok, err := d.ReadToken()
			if err != nil {
				return nil, t.refSyntaxError(d, err)
			}
			if tok.Kind() == '}' {
				return obj, nil
			}
			name := tok.String()
			if tok, err = d.ReadToken(); err != nil {
				return nil, t.refSyntaxError(d, err)
			}
			if obj[name], err = t.refScanValue(d, tok, lim); err != nil {
				return nil, err
			}
		}
	case '[':
		arr := []any{}
		for {
			tok, err := d.ReadToken()
			if err != nil {
				return nil, t.refSyntaxError(d, err)
			}
			if tok.Kind() == ']' {
				return arr, nil
			}
			v, err := t.refScanValue(d, tok, lim)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
	}
	return nil, rejection(InvalidInput, "syntax", "The arguments are not valid JSON.")
}

// checkNumber refuses numbers whose canonical form would not be exact: not
// finite as a double, an integer beyond ±(2^53−1), or a nonzero number that
// rounds to zero. Its error is a rule, never the number.
func refCheckNumber(raw string) error {
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

// syntaxError turns a jsontext error into a fixed sentence. The library's
// own text quotes the input, so it is never passed on.
func (t *ToolInfo) refSyntaxError(d *jsontext.Decoder, err error) *Error {
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

// schemaError turns the validator's findings into one *Error: a broken size
// limit first (INPUT_TOO_LARGE belongs to stage 2), then an unknown member
// (a misspelt name would otherwise read as a missing one), then the rest in
// document order.
func (t *ToolInfo) refSchemaError(ve *validator.ValidationError) *Error {
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
		return cmp.Compare(refRank(a.ErrorKind), refRank(b.ErrorKind))
	})
	e := t.refRuleError(leaves[0])
	if e.rule == "" {
		e.rule = "schema" // a false subschema has no keyword
		if kw := leaves[0].ErrorKind.KeywordPath(); len(kw) > 0 {
			e.rule = kw[len(kw)-1]
		}
	}
	return e
}

func refRank(k validator.ErrorKind) int {
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
func (t *ToolInfo) refRuleError(e *validator.ValidationError) *Error {
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

// compileReference compiles a schema for the reference validator.
func compileReference(name string, raw []byte) (*validator.Schema, error) {
	doc, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := validator.NewCompiler()
	if err := c.AddResource(name, doc); err != nil {
		return nil, err
	}
	return c.Compile(name)
}
