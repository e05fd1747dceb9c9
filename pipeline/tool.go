package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/invopop/jsonschema"
	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/auditlog"
)

// Key is embedded in the input type of every write tool: the idempotency
// key of docs/DESIGN.md section 5. Its description says when to keep the
// key and when to make a new one: models mint a fresh key on each retry
// unless told otherwise, and a fresh key runs the write twice.
type Key struct {
	IdempotencyKey string `json:"idempotency_key" jsonschema:"minLength=8,maxLength=128,pattern=^[A-Za-z0-9._:-]+$" jsonschema_description:"Chosen by the caller for this write. After an error or a timeout, send the same call again with this same key; use a new key only for a new operation."`
}

// RetryAdvice ends the description of every write tool, Define adds it:
// the one sentence that keeps a retry from running a write twice.
const RetryAdvice = "After an error or a timeout, send the same call again with the same idempotency_key; use a new key only for a new operation."

func (k *Key) idempotencyKey() string { return k.IdempotencyKey }

type keyed interface{ idempotencyKey() string }

// Confirm is embedded in the input type of every destructive tool: without
// "confirm": true the call answers CONFIRMATION_REQUIRED with a preview.
type Confirm struct {
	Confirm bool `json:"confirm,omitempty" jsonschema_description:"Must be true to carry out the deletion; without it the call only previews it."`
}

func (c *Confirm) confirmed() bool { return c.Confirm }

type confirmable interface{ confirmed() bool }

// Validator is implemented by an input type with rules its schema cannot
// state, such as Unicode character classes or normal forms. The strict parse
// (stage 3) calls Validate on the decoded input once the schema has passed,
// so a refusal is a stage-3 rejection: nothing written, no audit event, the
// key unused. Validate may normalise the input in place, and the handler
// then sees the normalised value; the request digest is still that of the
// arguments as sent. It returns nil or an *Error made by Invalid; any other
// error is INTERNAL. Implement it on the pointer type the pipeline decodes
// into (*In).
type Validator interface{ Validate() error }

// Spec describes a tool: its name, its kind and its handler. In and Out are
// the Go types its input and output schemas are generated from; the input
// schema is the one the strict parse enforces and tools/list advertises. D
// is the domain store the handler works on (op.Store).
type Spec[D, In, Out any] struct {
	Name        string
	Title       string
	Description string
	// ReadOnly tools run in a read transaction, take no idempotency key and
	// write no audit event. Every other tool is a write tool: In must embed
	// Key.
	ReadOnly bool
	// Destructive write tools delete: they must embed Confirm in In, and
	// have a Preview.
	Destructive bool
	// Overwrites marks a write tool that changes or replaces existing data
	// without deleting it (an update). It needs no confirmation, but
	// clients are told the truth: it is advertised as destructive.
	Overwrites bool
	// Run is the handler. It returns the result, or an *Error with one of
	// the codes a handler may return (NOT_FOUND, REVISION_CONFLICT,
	// ALREADY_EXISTS, RECORD_LOCKED, PROJECT_NOT_EMPTY); any other error,
	// and any panic, becomes INTERNAL. Its changes through op.Store commit
	// only if it succeeds.
	Run func(ctx context.Context, op *Op[D], in *In) (*Out, error)
	// Preview describes what an unconfirmed destructive call would do. It
	// runs in a read transaction.
	Preview func(ctx context.Context, op *Op[D], in *In) (any, error)
}

// Tool is a defined tool, ready to register with a Pipeline[D]: what a
// client sees of it, and its handler.
type Tool[D any] struct {
	*ToolInfo
	run     func(ctx context.Context, op *Op[D], in any) (any, error)
	preview func(ctx context.Context, op *Op[D], in any) (any, error)
	// external is set on a tool whose effect is outside the store
	// (DefineExternal): it has no run.
	external *external
}

// ToolInfo is what a client sees of a tool (its name, kind and schemas),
// with the strict parse of its arguments.
type ToolInfo struct {
	Name        string
	Title       string
	Description string
	ReadOnly    bool
	Destructive bool // deletes: needs "confirm": true
	Overwrites  bool // changes existing data without deleting it
	// Scope, if set, is a scope the caller must also hold: an upstream's
	// own (docs/UPSTREAMS.md).
	Scope string
	// OpenWorld marks a tool whose effect is outside writerd (an
	// upstream's): clients are told so (openWorldHint).
	OpenWorld bool
	// need, if set, is the scope the tool needs instead of read or write
	// (the resolution tool's admin).
	need Scope
	// InputSchema and OutputSchema are the JSON Schemas (draft 2020-12)
	// generated from the Go types: the advertised ones are the enforced ones.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage

	input    *schema         // enforced by the strict parse
	result   *schema         // the output schema, checked by dispatch before the write commits
	names    map[string]bool // every member name the input schema defines
	newInput func() any
}

// Additive reports whether the tool only adds (a create): a write that
// neither deletes nor overwrites.
func (t *ToolInfo) Additive() bool { return !t.ReadOnly && !t.Destructive && !t.Overwrites }

// Define builds a Tool from a Spec: it generates and compiles the schemas and
// checks that the types fit the tool's kind. It returns an error for a spec
// that could let unbounded or unparsed input through.
func Define[D, In, Out any](s Spec[D, In, Out]) (*Tool[D], error) {
	if s.Name == "" || s.Run == nil {
		return nil, fmt.Errorf("pipeline: tool %q: a name and a Run are required", s.Name)
	}
	_, isKeyed := any(new(In)).(keyed)
	_, isConfirmable := any(new(In)).(confirmable)
	switch {
	case s.ReadOnly && isKeyed:
		return nil, fmt.Errorf("pipeline: tool %s: a read tool takes no idempotency key", s.Name)
	case !s.ReadOnly && !isKeyed:
		return nil, fmt.Errorf("pipeline: tool %s: a write tool's input must embed pipeline.Key", s.Name)
	case s.ReadOnly && s.Overwrites:
		return nil, fmt.Errorf("pipeline: tool %s: a read tool overwrites nothing", s.Name)
	case s.Destructive && (s.ReadOnly || !isConfirmable || s.Preview == nil):
		return nil, fmt.Errorf("pipeline: tool %s: a destructive tool is a write tool that embeds pipeline.Confirm and has a Preview", s.Name)
	}
	description := s.Description
	if isKeyed {
		description = strings.TrimSpace(description + " " + RetryAdvice)
	}
	t := &Tool[D]{
		ToolInfo: &ToolInfo{
			Name: s.Name, Title: s.Title, Description: description,
			ReadOnly: s.ReadOnly, Destructive: s.Destructive, Overwrites: s.Overwrites,
			newInput: func() any { return new(In) },
		},
		run: func(ctx context.Context, op *Op[D], in any) (any, error) {
			out, err := s.Run(ctx, op, in.(*In))
			if err != nil {
				return nil, err
			}
			if out == nil {
				return nil, fmt.Errorf("pipeline: tool %s returned no result", s.Name)
			}
			return out, nil
		},
	}
	if s.Preview != nil {
		t.preview = func(ctx context.Context, op *Op[D], in any) (any, error) { return s.Preview(ctx, op, in.(*In)) }
	}
	var err error
	if t.InputSchema, err = generateSchema[In](); err != nil {
		return nil, fmt.Errorf("pipeline: tool %s: input schema: %w", s.Name, err)
	}
	if t.input, err = compileSchema(t.InputSchema); err != nil {
		return nil, fmt.Errorf("pipeline: tool %s: input %w", s.Name, err)
	}
	if t.OutputSchema, err = generateSchema[Out](); err != nil {
		return nil, fmt.Errorf("pipeline: tool %s: output schema: %w", s.Name, err)
	}
	if t.result, err = compileSchema(t.OutputSchema); err != nil {
		return nil, fmt.Errorf("pipeline: tool %s: output %w", s.Name, err)
	}
	var tree map[string]any
	if err := json.Unmarshal(t.InputSchema, &tree); err != nil {
		return nil, err
	}
	if err := checkBounded("", tree); err != nil {
		return nil, fmt.Errorf("pipeline: tool %s: %w", s.Name, err)
	}
	t.names = make(map[string]bool)
	collectNames(tree, t.names)
	return t, nil
}

// MustDefine is Define for tools defined at start-up: it panics on error.
func MustDefine[D, In, Out any](s Spec[D, In, Out]) *Tool[D] {
	t, err := Define(s)
	if err != nil {
		panic(err)
	}
	return t
}

// Schema is a JSON Schema as the generator builds it. An input or output
// type whose bounds struct tags cannot express (an open map, say) declares
// its own with a method JSONSchema() *pipeline.Schema.
type Schema = jsonschema.Schema

// reflector generates closed schemas: no unknown members, no $refs, so that
// the schema a client reads is self-contained.
var reflector = jsonschema.Reflector{
	DoNotReference: true,
	ExpandedStruct: true,
	Anonymous:      true,
}

// generateSchema generates the schema of a Go type, integers bounded.
func generateSchema[T any]() (json.RawMessage, error) {
	s := reflector.ReflectFromType(reflect.TypeFor[T]())
	boundIntegers(s)
	return json.Marshal(s)
}

// boundIntegers gives every integer without bounds of its own the bounds
// the strict parse enforces, ±(2^53−1), so that the advertised schema says
// what is enforced.
func boundIntegers(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if s.Type == "integer" {
		if s.Minimum == "" {
			s.Minimum = json.Number(strconv.Itoa(-maxSafeInteger))
		}
		if s.Maximum == "" {
			s.Maximum = json.Number(strconv.Itoa(maxSafeInteger))
		}
	}
	if s.Properties != nil {
		for pair := s.Properties.Oldest(); pair != nil; pair = pair.Next() {
			boundIntegers(pair.Value)
		}
	}
	for _, sub := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf, s.PrefixItems} {
		for _, x := range sub {
			boundIntegers(x)
		}
	}
	for _, x := range []*jsonschema.Schema{s.Items, s.AdditionalProperties, s.Not, s.PropertyNames, s.If, s.Then, s.Else, s.Contains} {
		boundIntegers(x)
	}
}

// checkBounded refuses a schema in which a string, array or open object has
// no upper bound: the limits of stage 2 come from the schema. It reads
// through local $refs (which compileSchema has already resolved, and found
// acyclic) and names the subschema by its JSON Pointer into the schema.
func checkBounded(at string, s map[string]any) error {
	return boundedNode(s, at, s, 0)
}

func boundedNode(root map[string]any, at string, s map[string]any, depth int) error {
	if depth > maxSubschemas {
		return fmt.Errorf("schema %s: nested too deep", cmpOr(at, "/"))
	}
	if ref, ok := s["$ref"].(string); ok {
		ptr := strings.TrimPrefix(ref, "#")
		target, _ := resolvePointer(any(root), ptr)
		m, ok := target.(map[string]any)
		if !ok {
			return nil // a boolean: bounded or nothing
		}
		return boundedNode(root, ptr, m, depth+1)
	}
	types := map[string]bool{}
	switch t := s["type"].(type) {
	case string:
		types[t] = true
	case []any:
		for _, x := range t {
			if name, ok := x.(string); ok {
				types[name] = true
			}
		}
	}
	if types["string"] {
		if _, ok := s["maxLength"]; !ok {
			if _, ok := s["enum"]; !ok {
				if _, ok := s["const"]; !ok {
					return fmt.Errorf("string %s has no maxLength", cmpOr(at, "/"))
				}
			}
		}
	}
	if types["array"] {
		if _, ok := s["maxItems"]; !ok {
			return fmt.Errorf("array %s has no maxItems", cmpOr(at, "/"))
		}
	}
	if types["object"] {
		if ap, ok := s["additionalProperties"]; !ok || ap != false {
			if _, ok := s["maxProperties"]; !ok {
				return fmt.Errorf("open object %s has no maxProperties", cmpOr(at, "/"))
			}
		}
	}
	for _, kw := range []string{"items", "additionalProperties", "propertyNames"} {
		if sub, ok := s[kw].(map[string]any); ok {
			if err := boundedNode(root, at+"/"+kw, sub, depth+1); err != nil {
				return err
			}
		}
	}
	for _, kw := range []string{"anyOf", "oneOf", "allOf"} {
		subs, _ := s[kw].([]any)
		for i, sub := range subs {
			if m, ok := sub.(map[string]any); ok {
				if err := boundedNode(root, fmt.Sprintf("%s/%s/%d", at, kw, i), m, depth+1); err != nil {
					return err
				}
			}
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for _, name := range slices.Sorted(maps.Keys(props)) {
			if m, ok := props[name].(map[string]any); ok {
				if err := boundedNode(root, at+"/properties/"+escapePointer.Replace(name), m, depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// collectNames gathers every member name the schema defines. Error pointers
// keep only such names (and array indices), so that a member name the caller
// made up is never echoed back.
func collectNames(s map[string]any, into map[string]bool) {
	for k, v := range s {
		m, isMap := v.(map[string]any)
		if k == "properties" && isMap {
			for name, sub := range m {
				into[name] = true
				if sm, ok := sub.(map[string]any); ok {
					collectNames(sm, into)
				}
			}
			continue
		}
		if isMap {
			collectNames(m, into)
		}
		if list, ok := v.([]any); ok {
			for _, item := range list {
				if sm, ok := item.(map[string]any); ok {
					collectNames(sm, into)
				}
			}
		}
	}
}

// decode unmarshals checked arguments into the tool's input type. The
// strict parse has already enforced the schema; decoding is strict too, so
// that the Go value can hold nothing the schema did not allow.
func (t *ToolInfo) decode(args []byte) (any, error) {
	in := t.newInput()
	if err := jsonv2.Unmarshal(args, in, jsonv2.RejectUnknownMembers(true)); err != nil {
		return nil, err
	}
	return in, nil
}

// sortTools sorts tools by name, for stable listings.
func sortTools(ts []*ToolInfo) {
	slices.SortFunc(ts, func(a, b *ToolInfo) int { return strings.Compare(a.Name, b.Name) })
}

// Op is what a handler works with: the domain store, bound to the
// transaction its change joins, the time of the call and who made it. One
// Op serves one call.
type Op[D any] struct {
	Store  D
	Now    time.Time
	Caller Caller

	targets []auditlog.Target
	// keys and running are the transaction's idempotency records and
	// the process's calls in flight, for the outcome tools.
	keys    Keys
	running func(principal, key string) bool
	// resolves and appended are the resolution tool's: the event's
	// resolves member, and what to write once the event has its id.
	resolves *auditlog.Resolution
	appended func(*auditlog.Event) error
}

// NewID returns a new ULID for an entity the handler creates.
func (op *Op[D]) NewID() string {
	return ulid.MustNew(ulid.Timestamp(op.Now), ulid.DefaultEntropy()).String()
}

// Touch records an entity the write touched, for its audit event. Handlers
// call it for each entity they create, change or delete, and for the entity
// a refusal is about.
func (op *Op[D]) Touch(kind, id string, revision int64) {
	op.targets = append(op.targets, auditlog.Target{Kind: kind, ID: id, Revision: revision})
}
