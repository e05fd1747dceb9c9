package pipeline

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/invopop/jsonschema"
)

// diffIn uses every keyword the checker compiles, in the shapes the
// generator writes them, for the differential fuzz test.
type diffIn struct {
	Key
	Confirm
	Name   string      `json:"name" jsonschema:"minLength=1,maxLength=5,pattern=^[a-z]+$"`
	Stamp  string      `json:"stamp,omitempty" jsonschema:"maxLength=12,pattern=^[0-9]{2}(:[0-9]{2})?$"`
	Count  *int        `json:"count,omitempty" jsonschema:"minimum=-5,maximum=5"`
	Big    int64       `json:"big,omitempty"`
	Score  *float64    `json:"score,omitempty" jsonschema:"minimum=-1.5,maximum=0.1"`
	Tags   []string    `json:"tags,omitempty" jsonschema:"minItems=1,maxItems=3,uniqueItems=true,maxLength=4"`
	Mode   string      `json:"mode,omitempty" jsonschema:"enum=a,enum=b,enum="`
	Flag   *bool       `json:"flag,omitempty"`
	Meta   diffMeta    `json:"meta,omitempty"`
	Nested *diffNested `json:"nested,omitempty"`
	Never  *string     `json:"never,omitempty" jsonschema:"maxLength=1"`
	Fixed  string      `json:"fixed,omitempty" jsonschema:"maxLength=5"`
}

func (diffIn) JSONSchemaExtend(s *jsonschema.Schema) {
	s.Properties.Set("never", jsonschema.FalseSchema)
	fixed, _ := s.Properties.Get("fixed")
	fixed.Const = "fixed"
	name, _ := s.Properties.Get("name")
	name.Not = &jsonschema.Schema{Const: "no"}
	one, two := uint64(1), uint64(2)
	s.OneOf = []*jsonschema.Schema{
		{Required: []string{"name"}, Not: &jsonschema.Schema{Required: []string{"stamp"}}},
		{Required: []string{"stamp"}, Not: &jsonschema.Schema{Required: []string{"name"}}},
		{Required: []string{"name", "stamp"}, MinProperties: &two},
	}
	s.AllOf = []*jsonschema.Schema{{MinProperties: &one}}
}

// diffMeta is an open object with bounded names and values of several types.
type diffMeta map[string]any

func (diffMeta) JSONSchema() *jsonschema.Schema {
	three, four, ten := uint64(3), uint64(4), uint64(10)
	return &jsonschema.Schema{
		Type:          "object",
		MaxProperties: &four,
		MinProperties: nil,
		PropertyNames: &jsonschema.Schema{Type: "string", MaxLength: &three, MinLength: nil, Pattern: "^[a-z0-9]+$"},
		AdditionalProperties: &jsonschema.Schema{AnyOf: []*jsonschema.Schema{
			{Type: "string", MaxLength: &ten},
			{Type: "integer", Minimum: "0", Maximum: "100"},
			{Type: "boolean"},
			{Type: "null"},
		}},
	}
}

type diffNested struct {
	Items []diffItem `json:"items" jsonschema:"maxItems=2"`
	Any   []string   `json:"any,omitempty" jsonschema:"maxItems=40,uniqueItems=true,maxLength=3"`
}

type diffItem struct {
	ID  string   `json:"id" jsonschema:"maxLength=3"`
	N   float64  `json:"n,omitempty" jsonschema:"minimum=0,maximum=1e3"`
	Sub []string `json:"sub,omitempty" jsonschema:"maxItems=1,maxLength=2"`
}

// diffTools are the tools the in-package differential fuzz test runs: the
// built-in tools' shapes are fuzzed the same way from pipeline_test.
func diffTools(tb testing.TB) []*ToolInfo {
	tb.Helper()
	run := func(context.Context, *Op[any], *diffIn) (*fuzzOut, error) { return &fuzzOut{}, nil }
	return []*ToolInfo{
		rawTool(tb, "memory", memorySchema),
		rawTool(tb, "refs", refSchema),
		rawTool(tb, "defs", defsSchema),
		MustDefine(Spec[any, diffIn, fuzzOut]{Name: "diff", Run: run}).ToolInfo,
		MustDefine(Spec[any, fuzzIn, fuzzOut]{
			Name: "fuzz",
			Run:  func(_ context.Context, _ *Op[any], _ *fuzzIn) (*fuzzOut, error) { return &fuzzOut{}, nil },
		}).ToolInfo,
	}
}

// agreeWithReference fails unless check and the reference validator agree
// on args: both accept, or both refuse with the same code.
func agreeWithReference(t *testing.T, tool *ToolInfo, args []byte, lim Limits) {
	t.Helper()
	_, got := tool.check(args, lim)
	want := tool.referenceCheck(args, lim)
	if (got == nil) != (want == nil) {
		t.Fatalf("%s %q: check says %v, the reference %v", tool.Name, args, got, want)
	}
	if got == nil {
		return
	}
	var g, w *Error
	if !errors.As(got, &g) || !errors.As(want, &w) {
		t.Fatalf("%s %q: errors %T %v and %T %v", tool.Name, args, got, got, want, want)
	}
	if g.Code != w.Code {
		t.Fatalf("%s %q: check refuses with %s %q, the reference with %s %q", tool.Name, args, g.Code, g.Message, w.Code, w.Message)
	}
	if g.Code != InvalidInput && g.Code != InputTooLarge {
		t.Fatalf("%s %q: %s is not a rejection", tool.Name, args, g.Code)
	}
	if !strings.HasSuffix(g.Message, ".") {
		t.Fatalf("%s %q: message %q is not a sentence", tool.Name, args, g.Message)
	}
}

// diffSeeds are arguments near every rule of diffIn and fuzzIn.
var diffSeeds = []string{
	`{"idempotency_key":"k-00000001","name":"a"}`,
	`{"idempotency_key":"k-00000001","name":"abcdef"}`,
	`{"idempotency_key":"k-00000001","name":"no"}`,
	`{"idempotency_key":"k-00000001","name":"A"}`,
	`{"idempotency_key":"k-00000001","stamp":"12:34"}`,
	`{"idempotency_key":"k-00000001","name":"a","stamp":"12"}`,
	`{"idempotency_key":"k-00000001","stamp":"1234"}`,
	`{"idempotency_key":"k-00000001"}`,
	`{}`,
	`{"idempotency_key":"k-00000001","name":"a","count":5,"big":9007199254740991,"score":0.1,"tags":["a","b"],"mode":"","flag":true,"confirm":true}`,
	`{"idempotency_key":"k-00000001","name":"a","count":5.0,"big":-9007199254740991.0e0,"score":0.1000000000000000000001}`,
	`{"idempotency_key":"k-00000001","name":"a","count":1.5,"big":1e15,"score":-1.5}`,
	`{"idempotency_key":"k-00000001","name":"a","count":5.0000000000000000001}`,
	`{"idempotency_key":"k-00000001","name":"a","count":-5.00000000000000000001}`,
	`{"idempotency_key":"k-00000001","name":"a","count":9007199254740992}`,
	`{"idempotency_key":"k-00000001","name":"a","count":1e400}`,
	`{"idempotency_key":"k-00000001","name":"a","score":1e-400}`,
	`{"idempotency_key":"k-00000001","name":"a","tags":[]}`,
	`{"idempotency_key":"k-00000001","name":"a","tags":["a","a"]}`,
	`{"idempotency_key":"k-00000001","name":"a","tags":["a","b","c","d"]}`,
	`{"idempotency_key":"k-00000001","name":"a","tags":["abcde",1]}`,
	`{"idempotency_key":"k-00000001","name":"a","mode":"c"}`,
	`{"idempotency_key":"k-00000001","name":"a","meta":{"a":"x","b":1,"c":true,"d":null}}`,
	`{"idempotency_key":"k-00000001","name":"a","meta":{"a":"x","b":1,"c":true,"d":null,"e":2}}`,
	`{"idempotency_key":"k-00000001","name":"a","meta":{"abcd":1}}`,
	`{"idempotency_key":"k-00000001","name":"a","meta":{"A":1}}`,
	`{"idempotency_key":"k-00000001","name":"a","meta":{"a":101}}`,
	`{"idempotency_key":"k-00000001","name":"a","meta":{"a":"01234567890"}}`,
	`{"idempotency_key":"k-00000001","name":"a","meta":{"a":[]}}`,
	`{"idempotency_key":"k-00000001","name":"a","nested":{"items":[{"id":"x","n":1e3,"sub":["ab"]}],"any":["a","b"]}}`,
	`{"idempotency_key":"k-00000001","name":"a","nested":{"items":[{"id":"xxxx"},{"id":"x","n":1000.0000000000001},{}]}}`,
	`{"idempotency_key":"k-00000001","name":"a","nested":{"items":[{"id":"x","sub":["abc","d"]}]}}`,
	`{"idempotency_key":"k-00000001","name":"a","nested":{"any":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q","r","s","t","u","a"]}}`,
	`{"idempotency_key":"k-00000001","name":"a","never":"x"}`,
	`{"idempotency_key":"k-00000001","name":"a","fixed":"fixed"}`,
	`{"idempotency_key":"k-00000001","name":"a","fixed":"other"}`,
	`{"idempotency_key":"k-00000001","name":"a","Name":"b"}`,
	`{"idempotency_key":"k-00000001","name":"a","name":"b"}`,
	`{"idempotency_key":"k-00000001","name":null}`,
	`{"idempotency_key":"k-00000001","name":"\u00e9"}`,
	`{"idempotency_key":"k-00000001","name":"a","nested":{"items":[[[[]]]]}}`,
	`{"idempotency_key":"k-00000001","name":"a"} x`,
	`{"idempotency_key":"k-00000001","name":"\ud800"}`,
	"{\"idempotency_key\":\"k-00000001\",\"name\":\"\xff\"}",
	`{"idempotency_key":"k-00000001","name":"a","count":-0,"big":0e-400}`,
	`[]`, ``, `{`, `null`, `"x"`, `1`, `{"a":1,}`,
	// memory, refs and defs: draft-07 and $refs.
	`{"entities":[{"name":"a","entityType":"person","observations":["x"]}]}`,
	`{"entities":[{"name":"a","entityType":"place","observations":["x","y","z"]}]}`,
	`{"entities":[{"name":"abcdefghi","entityType":"p","observations":[]}]}`,
	`{"entities":[{"name":"","entityType":"x","observations":["ABC"]}],"one":"b","odd":9}`,
	`{"entities":[{"name":"a","entityType":"person"},{},{},{}],"odd":10}`,
	`{"entities":[{"name":"a","entityType":"person","extra":1}],"one":""}`,
	`{"entities":[],"odd":1.0,"one":"abcdefghi"}`,
	`{"entities":{}}`,
	`{"a":"abc","b":null,"n":1}`, `{"a":"abcd","b":"x","n":-1.5}`, `{"a":1,"b":2,"n":"x"}`, `{"b":"abcd"}`, `{"c":1}`,
}

// Ensure the schema checker and the reference validator agree on every
// input: the same verdict, and a refusal's same code. Run with -fuzz to
// search beyond the seeds.
func FuzzCheckAgreesWithReference(f *testing.F) {
	tools := diffTools(f)
	for i := range tools {
		for _, s := range diffSeeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	lim := Limits{MaxBytes: 4 << 10, MaxDepth: 5}
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		agreeWithReference(t, tools[int(which)%len(tools)], args, lim)
	})
}

// Ensure StrictJSON never panics, accepts an object exactly when the tool
// parse's JSON rules do, and refuses every duplicate member.
func FuzzStrictJSON(f *testing.F) {
	tool := rawTool(f, "any", `{"type":"object","maxProperties":100000}`)
	for _, s := range diffSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{`1`, `[{"a":1,"a":2}]`, `"\ud800"`, `[[[[[[]]]]]]`, `9007199254740992`, `{"a":{"b":1,"b":1}}`} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxBytes: 4 << 10, MaxDepth: 5}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := StrictJSON(b, lim)
		if err == nil {
			v := jsontext.Value(bytes.Clone(b))
			if !v.IsValid(jsontext.AllowDuplicateNames(false)) {
				t.Fatalf("StrictJSON accepted %q, not valid JSON without duplicates", b)
			}
		}
		if len(bytes.TrimSpace(b)) > 0 && bytes.TrimSpace(b)[0] == '{' {
			_, perr := tool.check(b, lim)
			if (err == nil) != (perr == nil) {
				t.Fatalf("%q: StrictJSON says %v, the tool parse %v", b, err, perr)
			}
		}
	})
}
