package pipeline

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/writerd/writerd/digest"
)

const d07 = `"$schema":"http://json-schema.org/draft-07/schema#",`

// Ensure CheckSchema refuses, at their edges, what the strict parse does
// not enforce, naming the subschema by JSON Pointer and the keyword.
func TestCheckSchema_Refusals(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"$schema":"http://json-schema.org/draft-06/schema#","type":"object","additionalProperties":false}`, `schema /: keyword "$schema"`},
		{`{"$schema":"https://json-schema.org/draft/2019-09/schema","type":"object","additionalProperties":false}`, `schema /: keyword "$schema"`},
		{`{` + d07 + `"type":"object","additionalProperties":false,"properties":{"tags":{"type":"array","maxItems":2,"items":[{"type":"string","maxLength":1}]}}}`, `schema /properties/tags: keyword "items": array form`},
		{`{` + d07 + `"type":"object","additionalProperties":false,"properties":{"tags":{"type":"array","maxItems":2,"items":{"type":"string","maxLength":1},"additionalItems":false}}}`, `schema /properties/tags: keyword "additionalItems" is not enforced`},
		{`{` + d07 + `"type":"object","additionalProperties":false,"properties":{"x":{"type":"object","additionalProperties":false,"dependencies":{"a":["b"]}}}}`, `schema /properties/x: keyword "dependencies" is not enforced`},
		{`{` + d07 + `"type":"object","additionalProperties":false,"properties":{"u":{"type":"string","maxLength":9,"format":"uri"}}}`, `schema /properties/u: keyword "format" is not enforced`},
		{`{"type":"object","additionalProperties":false,"properties":{"a~b/c":{"type":"string","maxLength":1,"exclusiveMinimum":0}}}`, `schema /properties/a~0b~1c: keyword "exclusiveMinimum"`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"#/$defs/none"}},"$defs":{}}`, `schema /properties/x: keyword "$ref": "#/$defs/none" names nothing`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"other.json#/$defs/s"}},"$defs":{"s":true}}`, `schema /properties/x: keyword "$ref": "other.json#/$defs/s" is not a local ref`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"#"}}}`, `schema /properties/x: keyword "$ref": "#" is not a local ref`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"#/properties/y"},"y":true}}`, `is not a local ref`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"#/$defs/a%20b"}},"$defs":{"a b":true}}`, `is not a local ref`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"#/$defs/s","maxLength":3}},"$defs":{"s":{"type":"string","maxLength":5}}}`, `schema /properties/x: keyword "$ref": sibling keyword "maxLength"`},
		{`{` + d07 + `"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"#/definitions/s","type":"string"}},"definitions":{"s":{"type":"string","maxLength":5}}}`, `sibling keyword "type"`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"#/$defs/n"}},"$defs":{"n":{"type":"object","additionalProperties":false,"properties":{"next":{"$ref":"#/$defs/n"}}}}}`, `schema /$defs/n/properties/next: keyword "$ref": "#/$defs/n" is recursive`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"#/$defs/a"}},"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}}}`, `is recursive`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$ref":"#/$defs/s"}},"$defs":{"s":{"type":"string"}}}`, `string /$defs/s has no maxLength`},
		{`{` + d07 + `"type":"object","additionalProperties":false,"properties":{"x":{"type":"array","maxItems":3,"items":{"$ref":"#/definitions/o"}}},"definitions":{"o":{"type":"object"}}}`, `open object /definitions/o has no maxProperties`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"type":["string","null"]}}}`, `string /properties/x has no maxLength`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$defs":{"s":true}}}}`, `schema /properties/x: keyword "$defs": only at the root`},
		{`{"type":"object","additionalProperties":false,"properties":{"x":{"$id":"x","type":"boolean"}}}`, `schema /properties/x: keyword "$id": only at the root`},
		{`{"type":"object","additionalProperties":false,"$defs":{"s":{"type":"string","maxLength":1,"multipleOf":2}}}`, `schema /$defs/s: keyword "multipleOf" is not enforced`},
		{`{"type":"object","additionalProperties":false,"$defs":[]}`, `keyword "$defs": not an object`},
		{`{"type":"object"} {}`, `not one JSON value`},
	} {
		err := CheckSchema([]byte(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckSchema(%s) = %v, want %q", tc.raw, err, tc.want)
		}
	}
}

// memorySchema is @modelcontextprotocol/server-memory's create_entities
// input schema (draft-07, zod-to-json-schema), with the bounds an
// operator's config adds.
const memorySchema = `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{
"entities":{"type":"array","maxItems":3,"items":{"type":"object","properties":{
"name":{"type":"string","maxLength":8,"description":"The name of the entity"},
"entityType":{"type":"string","maxLength":8},
"observations":{"type":"array","maxItems":2,"items":{"type":"string","maxLength":6}}},
"required":["name","entityType","observations"],"additionalProperties":false}}},
"required":["entities"],"additionalProperties":false}`

// refSchema is memorySchema through $defs refs, nested pointers and
// escapes.
const refSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"urn:x","type":"object","properties":{
"entities":{"$ref":"#/$defs/list","description":"d"},"one":{"$ref":"#/$defs/entity/properties/name"},
"odd":{"$ref":"#/$defs/a~1b~0c"}},"required":["entities"],"additionalProperties":false,
"$defs":{"list":{"type":"array","maxItems":3,"items":{"$ref":"#/$defs/entity"}},
"entity":{"type":"object","properties":{"name":{"type":"string","maxLength":8,"minLength":1},
"entityType":{"enum":["person","place"]},"observations":{"type":"array","maxItems":2,"items":{"$ref":"#/$defs/obs"}}},
"required":["name","entityType"],"additionalProperties":false},
"obs":{"type":"string","maxLength":6,"pattern":"^[a-z]*$"},"a/b~c":{"type":"integer","minimum":0,"maximum":9}}}`

// defsSchema is a draft-07 schema with definitions and annotations beside
// its refs.
const defsSchema = `{"$schema":"http://json-schema.org/draft-07/schema","$comment":"c","title":"t","type":"object",
"properties":{"a":{"$ref":"#/definitions/s","title":"a","readOnly":false,"writeOnly":false,"deprecated":false,"examples":["x"],"default":"x"},
"b":{"anyOf":[{"$ref":"#/definitions/s"},{"type":"null"}]},"n":{"$ref":"#/definitions/n"}},
"additionalProperties":false,"definitions":{"s":{"type":"string","maxLength":3},"n":{"type":"number","minimum":-1,"maximum":1}}}`

// Ensure the schemas upstream servers send compile, and their names are
// collected through $defs and definitions.
func TestCheckSchema_Accepts(t *testing.T) {
	for _, raw := range []string{memorySchema, refSchema, defsSchema,
		`{"$schema":"http://json-schema.org/draft-07/schema","type":"object","additionalProperties":false}`,
		`{"$ref":"#/$defs/o","$defs":{"o":{"type":"object","additionalProperties":false}}}`,
	} {
		if err := CheckSchema([]byte(raw)); err != nil {
			t.Errorf("CheckSchema(%.60s…) = %v", raw, err)
		}
	}
	tool := rawTool(t, "ref", refSchema)
	for _, name := range []string{"entities", "name", "entityType", "observations"} {
		if !tool.names[name] {
			t.Errorf("names lack %q", name)
		}
	}
}

// rawTool is a tool whose input schema is raw, as an upstream's is.
func rawTool(tb testing.TB, name, raw string) *ToolInfo {
	tb.Helper()
	if err := CheckSchema([]byte(raw)); err != nil {
		tb.Fatal(err)
	}
	in, _ := compileSchema([]byte(raw))
	var tree map[string]any
	if err := json.Unmarshal([]byte(raw), &tree); err != nil {
		tb.Fatal(err)
	}
	t := &ToolInfo{Name: name, InputSchema: json.RawMessage(raw), input: in, names: map[string]bool{}}
	collectNames(tree, t.names)
	return t
}

// Ensure StrictJSON refuses what the strict parse refuses, of any value,
// at the edges of its limits.
func TestStrictJSON(t *testing.T) {
	lim := Limits{MaxBytes: 40, MaxDepth: 2}
	for _, ok := range []string{`1`, `"x"`, `null`, `[]`, `{"a":[1]}`, `9007199254740991`, `-9007199254740991`, `[-0.0,1e2]`,
		` {"a":{},"b":"\ud83d\ude00"} `, strings.Repeat(" ", 39) + "1"} {
		if err := StrictJSON([]byte(ok), lim); err != nil {
			t.Errorf("StrictJSON(%q) = %v", ok, err)
		}
	}
	for _, tc := range []struct {
		in   string
		want error
	}{
		{`{"a":1,"a":2}`, digest.ErrDuplicate},
		{`[{"a":1,"b":0,"a":2}]`, digest.ErrDuplicate},
		{`"\ud800"`, digest.ErrSurrogate},
		{"\"\xff\"", digest.ErrUTF8},
		{`1 2`, digest.ErrTrailing},
		{`[1`, digest.ErrTruncated},
	} {
		if err := StrictJSON([]byte(tc.in), lim); !errors.Is(err, tc.want) {
			t.Errorf("StrictJSON(%q) = %v, want %v", tc.in, err, tc.want)
		}
	}
	for _, bad := range []string{`9007199254740992`, `-9007199254740992`, `1e400`, `1e-400`, `[[[]]]`, `{"a":{"b":[]}}`,
		strings.Repeat(" ", 40) + "1", ``, `{"a":1,}`, `NaN`} {
		if err := StrictJSON([]byte(bad), lim); err == nil {
			t.Errorf("StrictJSON(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "400") && strings.Contains(bad, "400") {
			t.Errorf("StrictJSON(%q) = %v echoes the value", bad, err)
		}
	}
}
