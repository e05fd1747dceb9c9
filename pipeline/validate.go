package pipeline

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/writerd/writerd/digest"
)

// schema is a tool's input schema compiled for the strict parse. It
// enforces JSON Schema draft 2020-12 (or draft-07, where its keywords mean
// the same) as santhosh-tekuri/jsonschema v6 does, for the keywords
// writerd's and upstream servers' schemas use, local $refs resolved at
// compile time, on the parse's tape of the arguments; a differential fuzz
// test (validate_fuzz_test.go) holds the two to the same verdict and the
// same code on every input.
//
// compileSchema refuses any keyword it does not enforce, so that a new
// keyword in a generated schema is a start-up error, not a rule silently
// advertised and never checked.
type schema struct {
	never bool // the false schema

	types   uint8 // typeXxx bits; 0 for any
	enum    []string
	hasEnum bool // enum, or const (an enum of one)
	isConst bool

	// strings
	minLength, maxLength int // -1: none
	pattern              *regexp.Regexp
	simple               *simplePattern // pattern, when it is a run of one ASCII class

	// numbers
	minimum, maximum *bound

	// arrays
	minItems, maxItems int
	uniqueItems        bool
	items              *schema

	// objects
	properties          map[string]*schema
	required            []string
	additional          *schema // nil: any member allowed
	closed              bool    // additionalProperties: false
	minProps, maxProps  int
	propertyNames       *schema
	allOf, anyOf, oneOf []*schema
	not                 *schema
}

const (
	typeNull uint8 = 1 << iota
	typeBoolean
	typeObject
	typeArray
	typeNumber
	typeInteger
	typeString
)

var typeNames = map[string]uint8{
	"null": typeNull, "boolean": typeBoolean, "object": typeObject, "array": typeArray,
	"number": typeNumber, "integer": typeInteger, "string": typeString,
}

// typeOrder is the order in which a type error lists the types wanted.
var typeOrder = []string{"null", "boolean", "object", "array", "number", "integer", "string"}

type bound struct {
	f float64
	r *big.Rat
	s string // as the schema writes it
}

// annotations are the keywords that assert nothing (in draft 2020-12, with
// format an annotation as the reference validator treats it by default).
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"default": true, "examples": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"format": true,
}

// The $schema values compileSchema accepts.
const (
	draft2020 = "https://json-schema.org/draft/2020-12/schema"
	draft07   = "http://json-schema.org/draft-07/schema"
)

// errNotEnforced is a keyword the checker does not enforce.
var errNotEnforced = errors.New("is not enforced by the strict parse")

// maxSubschemas bounds the subschemas one schema compiles to, counting
// each use of a $ref target: refs can share a target many times over.
const maxSubschemas = 10000

// compileError is a schema that does not compile: where, as a JSON
// Pointer into the schema, and the keyword.
type compileError struct {
	at, kw string
	err    error
}

func (e *compileError) Error() string {
	at := cmpOr(e.at, "/")
	switch {
	case e.kw == "":
		return fmt.Sprintf("schema %s: %v", at, e.err)
	case errors.Is(e.err, errNotEnforced):
		return fmt.Sprintf("schema %s: keyword %q %v", at, e.kw, e.err)
	}
	return fmt.Sprintf("schema %s: keyword %q: %v", at, e.kw, e.err)
}

func (e *compileError) Unwrap() error { return e.err }

// compiler compiles one schema document: draft 2020-12, or draft-07 where
// its keywords mean what they mean in 2020-12, with local $refs into the
// root's $defs or definitions resolved at compile time.
type compiler struct {
	root      any
	draft07   bool
	resolving []string // the $ref targets being compiled, to refuse a cycle
	nodes     int
}

// compileSchema compiles an input or output schema: a generated one, or an
// upstream server's.
func compileSchema(raw []byte) (*schema, error) {
	var doc any
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("schema: not one JSON value")
	}
	c := &compiler{root: doc}
	if m, ok := doc.(map[string]any); ok {
		if v, ok := m["$schema"]; ok {
			switch v {
			case draft2020:
			case draft07, draft07 + "#":
				c.draft07 = true
			default:
				return nil, &compileError{kw: "$schema", err: fmt.Errorf("only drafts 2020-12 and 07 are enforced")}
			}
		}
		// Every definition compiles, used or not.
		for _, kw := range []string{"$defs", "definitions"} {
			v, ok := m[kw]
			if !ok {
				continue
			}
			defs, ok := v.(map[string]any)
			if !ok {
				return nil, &compileError{kw: kw, err: fmt.Errorf("not an object")}
			}
			for _, name := range slices.Sorted(maps.Keys(defs)) {
				if _, err := c.node("/"+kw+"/"+escapePointer.Replace(name), defs[name]); err != nil {
					return nil, err
				}
			}
		}
	}
	return c.node("", doc)
}

func (c *compiler) node(at string, v any) (*schema, error) {
	if c.nodes++; c.nodes > maxSubschemas {
		return nil, &compileError{at: at, err: fmt.Errorf("more than %d subschemas (counting each use of a $ref)", maxSubschemas)}
	}
	s := &schema{minLength: -1, maxLength: -1, minItems: -1, maxItems: -1, minProps: -1, maxProps: -1}
	switch v := v.(type) {
	case bool:
		s.never = !v
		return s, nil
	case map[string]any:
		if ref, ok := v["$ref"]; ok {
			return c.ref(at, v, ref)
		}
		for _, kw := range slices.Sorted(maps.Keys(v)) {
			if err := s.compileKeyword(c, at, kw, v[kw]); err != nil {
				var ce *compileError
				if errors.As(err, &ce) {
					return nil, err
				}
				return nil, &compileError{at: at, kw: kw, err: err}
			}
		}
		return s, nil
	}
	return nil, &compileError{at: at, err: fmt.Errorf("not an object or a boolean")}
}

// items compiles items: one schema. The array form (a tuple, draft-07)
// is not enforced.
func (c *compiler) items(at string, v any) (*schema, error) {
	if _, ok := v.([]any); ok {
		return nil, fmt.Errorf("array form (a tuple) is not enforced by the strict parse")
	}
	return c.node(at+"/items", v)
}

// ref compiles a schema that is a $ref: the target's schema, compiled where
// it stands. Beside a $ref only annotations are allowed (draft-07 ignores
// its siblings, 2020-12 applies them: refused, nothing means two things);
// only refs into the root's $defs or definitions resolve; a recursive ref
// is refused (the checker would need a bound besides the parse's depth for
// refs that consume no nesting).
func (c *compiler) ref(at string, m map[string]any, v any) (*schema, error) {
	fail := func(format string, args ...any) error {
		return &compileError{at: at, kw: "$ref", err: fmt.Errorf(format, args...)}
	}
	for _, kw := range slices.Sorted(maps.Keys(m)) {
		switch {
		case kw == "$ref", kw != "$schema" && kw != "$id" && annotations[kw]:
		case at == "" && (kw == "$schema" || kw == "$id" || kw == "$defs" || kw == "definitions"):
		default:
			return nil, fail("sibling keyword %q is not allowed beside $ref", kw)
		}
	}
	ref, ok := v.(string)
	if !ok {
		return nil, fail("not a string")
	}
	ptr, ok := strings.CutPrefix(ref, "#")
	if !ok || strings.Contains(ptr, "%") ||
		!strings.HasPrefix(ptr, "/$defs/") && !strings.HasPrefix(ptr, "/definitions/") {
		return nil, fail("%q is not a local ref into #/$defs or #/definitions", ref)
	}
	if slices.Contains(c.resolving, ptr) {
		return nil, fail("%q is recursive: recursive refs are not enforced by the strict parse", ref)
	}
	target, ok := resolvePointer(c.root, ptr)
	if !ok {
		return nil, fail("%q names nothing in the schema", ref)
	}
	c.resolving = append(c.resolving, ptr)
	defer func() { c.resolving = c.resolving[:len(c.resolving)-1] }()
	return c.node(ptr, target)
}

// resolvePointer finds the value a JSON Pointer names in doc.
func resolvePointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	for seg := range strings.SplitSeq(ptr[1:], "/") {
		seg = unescapePointer.Replace(seg)
		switch v := doc.(type) {
		case map[string]any:
			var ok bool
			if doc, ok = v[seg]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(v) || strconv.Itoa(i) != seg {
				return nil, false
			}
			doc = v[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

func (s *schema) compileKeyword(c *compiler, at, kw string, v any) error {
	var err error
	switch kw {
	case "type":
		switch v := v.(type) {
		case string:
			err = s.addType(v)
		case []any:
			for _, t := range v {
				name, _ := t.(string)
				if err = s.addType(name); err != nil {
					break
				}
			}
		default:
			err = fmt.Errorf("not a type")
		}
	case "enum", "const":
		vals := []any{v}
		if kw == "enum" {
			vals, _ = v.([]any)
		}
		for _, e := range vals {
			str, ok := e.(string)
			if !ok {
				return fmt.Errorf("only strings are enforced, not %v", e)
			}
			s.enum = append(s.enum, str)
		}
		s.hasEnum, s.isConst = true, kw == "const"
	case "minLength":
		s.minLength, err = count(v)
	case "maxLength":
		s.maxLength, err = count(v)
	case "pattern":
		p, _ := v.(string)
		if s.pattern, err = regexp.Compile(p); err == nil {
			s.simple = compileSimple(p)
		}
	case "minimum":
		s.minimum, err = newBound(v)
	case "maximum":
		s.maximum, err = newBound(v)
	case "minItems":
		s.minItems, err = count(v)
	case "maxItems":
		s.maxItems, err = count(v)
	case "uniqueItems":
		s.uniqueItems, _ = v.(bool)
	case "items":
		s.items, err = c.items(at, v)
	case "minProperties":
		s.minProps, err = count(v)
	case "maxProperties":
		s.maxProps, err = count(v)
	case "required":
		list, _ := v.([]any)
		for _, r := range list {
			name, ok := r.(string)
			if !ok {
				return fmt.Errorf("not a name")
			}
			s.required = append(s.required, name)
		}
	case "properties":
		props, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("not an object")
		}
		s.properties = make(map[string]*schema, len(props))
		for name, sub := range props {
			if s.properties[name], err = c.node(at+"/properties/"+escapePointer.Replace(name), sub); err != nil {
				return err
			}
		}
	case "additionalProperties":
		if b, ok := v.(bool); ok && !b {
			s.closed = true
		} else {
			s.additional, err = c.node(at+"/additionalProperties", v)
		}
	case "propertyNames":
		s.propertyNames, err = c.node(at+"/propertyNames", v)
	case "allOf", "anyOf", "oneOf":
		list, _ := v.([]any)
		if len(list) == 0 {
			return fmt.Errorf("empty")
		}
		subs := make([]*schema, len(list))
		for i, sub := range list {
			if subs[i], err = c.node(fmt.Sprintf("%s/%s/%d", at, kw, i), sub); err != nil {
				return err
			}
		}
		switch kw {
		case "allOf":
			s.allOf = subs
		case "anyOf":
			s.anyOf = subs
		default:
			s.oneOf = subs
		}
	case "not":
		s.not, err = c.node(at+"/not", v)
	case "format":
		if c.draft07 {
			// Draft-07 asserts format (as the reference does); the
			// checker does not.
			return errNotEnforced
		}
	case "$schema", "$id":
		if at != "" {
			return fmt.Errorf("only at the root")
		}
		if _, ok := v.(string); !ok {
			return fmt.Errorf("not a string")
		}
	case "$defs", "definitions":
		// Compiled by compileSchema, at the root only.
		if at != "" {
			return fmt.Errorf("only at the root")
		}
	default:
		if !annotations[kw] {
			return errNotEnforced
		}
	}
	return err
}

func (s *schema) typeNames() string {
	var names []string
	for _, n := range typeOrder {
		if s.types&typeNames[n] != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, " or ")
}

func (s *schema) addType(name string) error {
	t, ok := typeNames[name]
	if !ok {
		return fmt.Errorf("unknown type %q", name)
	}
	s.types |= t
	return nil
}

func count(v any) (int, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("not a number")
	}
	i, err := strconv.ParseInt(string(n), 10, 32)
	if err != nil || i < 0 {
		return 0, fmt.Errorf("not a count")
	}
	return int(i), nil
}

func newBound(v any) (*bound, error) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, fmt.Errorf("not a number")
	}
	r, ok := new(big.Rat).SetString(string(n))
	f, err := strconv.ParseFloat(string(n), 64)
	if !ok || err != nil {
		return nil, fmt.Errorf("not a finite number")
	}
	return &bound{f: f, r: r, s: string(n)}, nil
}

// simplePattern is a pattern ^[class]{min,max}$ (or +, *) of one ASCII
// character class, matched without the regexp engine.
type simplePattern struct {
	set      [4]uint64 // ASCII bytes in the class (bits 0–127 used)
	min, max int       // max -1: unbounded
}

func compileSimple(p string) *simplePattern {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return nil
	}
	if re.Op != syntax.OpConcat || len(re.Sub) != 3 ||
		re.Sub[0].Op != syntax.OpBeginText || re.Sub[2].Op != syntax.OpEndText {
		return nil
	}
	rep := re.Sub[1]
	sp := &simplePattern{}
	switch rep.Op {
	case syntax.OpPlus:
		sp.min, sp.max = 1, -1
	case syntax.OpStar:
		sp.min, sp.max = 0, -1
	case syntax.OpRepeat:
		sp.min, sp.max = rep.Min, rep.Max
	default:
		return nil
	}
	if len(rep.Sub) != 1 || rep.Sub[0].Op != syntax.OpCharClass {
		return nil
	}
	cc := rep.Sub[0].Rune
	for i := 0; i+1 < len(cc); i += 2 {
		lo, hi := cc[i], cc[i+1]
		if hi >= utf8.RuneSelf {
			return nil
		}
		for r := lo; r <= hi; r++ {
			sp.set[r/64] |= 1 << (r % 64)
		}
	}
	return sp
}

func (sp *simplePattern) match(s []byte) bool {
	if len(s) < sp.min || sp.max >= 0 && len(s) > sp.max {
		return false
	}
	for _, c := range s {
		if c >= utf8.RuneSelf || sp.set[c/64]&(1<<(c%64)) == 0 {
			return false
		}
	}
	return true
}

// A schema error, as the reference validator would report it: the rule
// broken, where, and the limit. Errors inside anyOf, oneOf, allOf and not
// are reported as one error of the group.
type schemaErr struct {
	rule  string   // the keyword
	at    string   // the value's JSON Pointer
	names []string // required: the missing member; additionalProperties: the unknown ones
	want  string   // the schema's limit, as a number or a pattern; type: the types
	null  bool     // type: the value is null
	// propertyNames: the rule a member name broke
	nameRule string
}

// checkResult checks an encoded result against the tool's output schema
// with the strict parse's checker: the check of stage 9, at a fraction of
// the reference validator's cost (BenchmarkCheckResult). It returns nil or
// an error naming the rule and where, for the logs.
func (t *ToolInfo) checkResult(b []byte) error {
	tp := tapes.Get().(*tape)
	defer tp.release()
	tp.maxDepth = maxResultDepth
	if _, err := digest.ParseArgs(b, tp.visitor); err != nil {
		return fmt.Errorf("result: %w", err)
	}
	c := &tp.checker
	c.tape = tp.entries
	if !c.check(t.result, 0) {
		slices.SortStableFunc(c.errs, func(a, b schemaErr) int { return cmp.Compare(a.rank(), b.rank()) })
		e := c.errs[0]
		return fmt.Errorf("result breaks its output schema: %s at %q", e.rule, e.at)
	}
	return nil
}

// maxResultDepth bounds the nesting of a result: deeper than the parser's
// own bound, so that only the schema decides.
const maxResultDepth = 10000

// step is one step of the path to a value: a member name, or an array
// index (name nil).
type step struct {
	name  []byte
	index int
}

// pointer renders the path to the value being checked as a JSON Pointer.
func (c *checker) pointer() string {
	segs := make([]string, len(c.path))
	for i, st := range c.path {
		if st.name == nil {
			segs[i] = strconv.Itoa(st.index)
		} else {
			segs[i] = string(st.name)
		}
	}
	return pointer(segs)
}

// checker walks the tape against a schema. With quiet set it only decides,
// and stops at the first error.
type checker struct {
	tape  []tapeEntry
	errs  []schemaErr
	quiet bool
	path  []step       // to the value being checked
	name  [1]tapeEntry // the tape of a member name checked against propertyNames
}

// check reports whether the value at tape index i is valid against s,
// recording its errors unless quiet.
func (c *checker) check(s *schema, i int32) bool {
	n := len(c.errs)
	ok := c.checkValue(s, i)
	if c.quiet {
		c.errs = c.errs[:n]
	}
	return ok
}

// fail records an error of the value being checked.
func (c *checker) fail(e schemaErr) bool {
	if !c.quiet {
		e.at = c.pointer()
		c.errs = append(c.errs, e)
	}
	return false
}

func (c *checker) checkValue(s *schema, i int32) bool {
	if s.never {
		return c.fail(schemaErr{rule: "false"})
	}
	e := &c.tape[i]
	t := e.typ()
	if s.types != 0 && s.types&t == 0 && !(s.types&typeInteger != 0 && t == typeNumber && isInteger(e.val)) {
		return c.fail(schemaErr{rule: "type", want: s.typeNames(), null: t == typeNull})
	}
	if s.hasEnum {
		found := t == typeString && slices.Contains(s.enum, string(e.val))
		if !found {
			rule := "enum"
			if s.isConst {
				rule = "const"
			}
			return c.fail(schemaErr{rule: rule})
		}
	}
	ok := true
	switch t {
	case typeObject:
		ok = c.checkObject(s, i)
	case typeArray:
		ok = c.checkArray(s, i)
	case typeString:
		ok = c.checkString(s, e.val)
	case typeNumber:
		ok = c.checkNumber(s, e)
	}
	if !ok && c.quiet {
		return false
	}
	if s.not != nil && c.sub(s.not, i) {
		ok = c.fail(schemaErr{rule: "not"})
	}
	if s.allOf != nil {
		for _, sub := range s.allOf {
			if !c.sub(sub, i) {
				ok = c.fail(schemaErr{rule: "allOf"})
				break
			}
		}
	}
	if s.anyOf != nil {
		matched := false
		for _, sub := range s.anyOf {
			if c.sub(sub, i) {
				matched = true
				break
			}
		}
		if !matched {
			ok = c.fail(schemaErr{rule: "anyOf"})
		}
	}
	if s.oneOf != nil {
		matched := 0
		for _, sub := range s.oneOf {
			if c.sub(sub, i) {
				if matched++; matched == 2 {
					break
				}
			}
		}
		if matched != 1 {
			ok = c.fail(schemaErr{rule: "oneOf"})
		}
	}
	return ok
}

// sub decides a subschema of a group quietly: the group is one error.
func (c *checker) sub(s *schema, i int32) bool {
	quiet := c.quiet
	c.quiet = true
	ok := c.check(s, i)
	c.quiet = quiet
	return ok
}

func (c *checker) checkObject(s *schema, i int32) bool {
	obj := &c.tape[i]
	ok := true
	n := int(obj.count)
	if s.minProps >= 0 && n < s.minProps {
		ok = c.fail(schemaErr{rule: "minProperties", want: strconv.Itoa(s.minProps)})
	}
	if s.maxProps >= 0 && n > s.maxProps {
		ok = c.fail(schemaErr{rule: "maxProperties", want: strconv.Itoa(s.maxProps)})
	}
	for _, r := range s.required {
		if !c.hasMember(i, r) {
			ok = c.fail(schemaErr{rule: "required", names: []string{r}})
			break
		}
	}
	if !ok && c.quiet {
		return false
	}
	var unknown []string
	for j := i + 1; j < obj.next; j = c.tape[j+1].next {
		name := c.tape[j].val
		if sub, found := s.properties[string(name)]; found {
			c.path = append(c.path, step{name: name})
			ok = c.check(sub, j+1) && ok
			c.path = c.path[:len(c.path)-1]
		} else if s.closed {
			ok = false
			if c.quiet {
				return false
			}
			unknown = append(unknown, string(name))
		} else if s.additional != nil {
			c.path = append(c.path, step{name: name})
			ok = c.check(s.additional, j+1) && ok
			c.path = c.path[:len(c.path)-1]
		}
		if !ok && c.quiet {
			return false
		}
	}
	if unknown != nil {
		c.fail(schemaErr{rule: "additionalProperties", names: unknown})
	}
	if s.propertyNames != nil {
		for j := i + 1; j < obj.next; j = c.tape[j+1].next {
			if rule := c.nameRule(s.propertyNames, c.tape[j].val); rule != "" {
				ok = c.fail(schemaErr{rule: "propertyNames", nameRule: rule})
				if c.quiet {
					return false
				}
			}
		}
	}
	return ok
}

// nameRule checks a member name against propertyNames and returns the
// first rule it breaks, a size limit first, or "".
func (c *checker) nameRule(s *schema, name []byte) string {
	tape, errs, quiet := c.tape, len(c.errs), c.quiet
	c.name[0] = tapeEntry{kind: '"', val: name, next: 1}
	c.tape, c.quiet = c.name[:], false
	ok := c.check(s, 0)
	found := c.errs[errs:]
	c.tape, c.errs, c.quiet = tape, c.errs[:errs], quiet
	if ok {
		return ""
	}
	rule := "schema"
	for i, e := range found {
		if i == 0 || e.rule == "maxLength" {
			rule = e.rule
		}
	}
	return rule
}

func (c *checker) hasMember(i int32, name string) bool {
	obj := &c.tape[i]
	for j := i + 1; j < obj.next; j = c.tape[j+1].next {
		if string(c.tape[j].val) == name {
			return true
		}
	}
	return false
}

func (c *checker) checkArray(s *schema, i int32) bool {
	arr := &c.tape[i]
	ok := true
	n := int(arr.count)
	if s.minItems >= 0 && n < s.minItems {
		ok = c.fail(schemaErr{rule: "minItems", want: strconv.Itoa(s.minItems)})
	}
	if s.maxItems >= 0 && n > s.maxItems {
		ok = c.fail(schemaErr{rule: "maxItems", want: strconv.Itoa(s.maxItems)})
	}
	if s.uniqueItems && n > 1 && c.repeats(i) {
		ok = c.fail(schemaErr{rule: "uniqueItems"})
	}
	if !ok && c.quiet {
		return false
	}
	if s.items != nil {
		k := 0
		for j := i + 1; j < arr.next; j = c.tape[j].next {
			c.path = append(c.path, step{index: k})
			ok = c.check(s.items, j) && ok
			c.path = c.path[:len(c.path)-1]
			if !ok && c.quiet {
				return false
			}
			k++
		}
	}
	return ok
}

// repeats reports whether an array repeats an item. Only strings are
// compared: compileSchema allows uniqueItems only where the items must be
// strings, so that an array of anything else is refused by items anyway
// and the verdict is the reference's.
func (c *checker) repeats(i int32) bool {
	arr := &c.tape[i]
	seen := make(map[string]struct{}, arr.count)
	for j := i + 1; j < arr.next; j = c.tape[j].next {
		e := &c.tape[j]
		if e.kind != '"' {
			continue
		}
		if _, dup := seen[string(e.val)]; dup {
			return true
		}
		seen[string(e.val)] = struct{}{}
	}
	return false
}

func (c *checker) checkString(s *schema, v []byte) bool {
	ok := true
	// A string of n bytes holds between n/4 and n code points: count them
	// only when that range straddles a limit.
	if s.minLength >= 0 && len(v) < 4*s.minLength && utf8.RuneCount(v) < s.minLength {
		ok = c.fail(schemaErr{rule: "minLength", want: strconv.Itoa(s.minLength)})
	}
	if s.maxLength >= 0 && len(v) > s.maxLength && utf8.RuneCount(v) > s.maxLength {
		ok = c.fail(schemaErr{rule: "maxLength", want: strconv.Itoa(s.maxLength)})
	}
	if s.pattern != nil {
		var match bool
		if s.simple != nil {
			match = s.simple.match(v)
		} else {
			match = s.pattern.Match(v)
		}
		if !match {
			ok = c.fail(schemaErr{rule: "pattern", want: s.pattern.String()})
		}
	}
	return ok
}

func (c *checker) checkNumber(s *schema, e *tapeEntry) bool {
	ok := true
	if s.minimum != nil && compareNumber(e, s.minimum) < 0 {
		ok = c.fail(schemaErr{rule: "minimum", want: s.minimum.r.RatString()})
	}
	if s.maximum != nil && compareNumber(e, s.maximum) > 0 {
		ok = c.fail(schemaErr{rule: "maximum", want: s.maximum.r.RatString()})
	}
	return ok
}

// compareNumber compares a number exactly with a bound, as the reference
// does with big.Rat: by their doubles, which rounding keeps in order,
// unless the doubles are equal.
func compareNumber(e *tapeEntry, b *bound) int {
	switch {
	case e.f < b.f:
		return -1
	case e.f > b.f:
		return 1
	}
	r, ok := new(big.Rat).SetString(string(e.val))
	if !ok {
		return 0
	}
	return r.Cmp(b.r)
}

// isInteger reports whether a JSON number's exact value is an integer, as
// JSON Schema counts them: 1.0 and 1e2 are, 1.5 and 1.0000000000000000001
// are not, whatever their doubles.
func isInteger(lit []byte) bool {
	if isDigits(lit) {
		return true
	}
	s := string(lit)
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	mant = strings.TrimPrefix(mant, "-")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimRight(intPart+frac, "0")
	if strings.Trim(digits, "0") == "" {
		return true // zero
	}
	e := 0
	if exp != "" {
		n, err := strconv.ParseInt(exp, 10, 32)
		if err != nil {
			if strings.HasPrefix(exp, "-") {
				return false
			}
			return true
		}
		e = int(n)
	}
	// The value is digits × 10^(e − len(frac) + trailing zeros dropped).
	scale := e - len(frac) + (len(intPart) + len(frac) - len(digits))
	return scale >= 0
}

// tapeEntry is one value of the parse's tape: the arguments as a flat list in
// document order, each object's members as a name entry followed by the
// value's entries.
type tapeEntry struct {
	kind  byte    // as digest.Token: '{', '[', 'k', '"', '0', 't', 'f', 'n'
	val   []byte  // names and strings: the value; numbers: the literal
	f     float64 // numbers: the nearest double
	next  int32   // the index just past this value (an object or array: past its last entry)
	count int32   // objects: members; arrays: items
}

func (e *tapeEntry) typ() uint8 {
	switch e.kind {
	case '{':
		return typeObject
	case '[':
		return typeArray
	case '"':
		return typeString
	case '0':
		return typeNumber
	case 'n':
		return typeNull
	default:
		return typeBoolean
	}
}

// isDigits reports whether a number's literal is an integer's digits
// alone, with an optional sign: the common case of isInteger.
func isDigits(lit []byte) bool {
	for i, c := range lit {
		if (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return false
		}
	}
	return true
}
