package pipeline

import (
	"context"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/invopop/jsonschema"
)

// Ensure a schema with a keyword the checker does not enforce does not
// compile, so that no rule is advertised and silently left unchecked.
func TestCompileSchema_RefusesUnenforcedKeywords(t *testing.T) {
	for _, kw := range []string{
		`"multipleOf":2`, `"exclusiveMinimum":0`, `"exclusiveMaximum":0`, `"patternProperties":{"a":{}}`,
		`"dependentRequired":{"a":["b"]}`, `"dependentSchemas":{"a":{}}`, `"if":{},"then":{}`, `"prefixItems":[{}]`,
		`"contains":{}`, `"minContains":1`, `"maxContains":1`, `"unevaluatedProperties":false`, `"unevaluatedItems":false`,
		`"$ref":"#"`, `"$defs":{}`, `"$dynamicRef":"#a"`, `"contentEncoding":"base64"`, `"contentSchema":{}`,
		`"enum":[1,2]`, `"const":{"a":1}`, `"mystery":true`,
	} {
		raw := `{"type":"object","properties":{"a":{` + kw + `}}}`
		if _, err := compileSchema([]byte(raw)); err == nil {
			t.Errorf("compileSchema(%s) compiled", raw)
		}
	}
	if _, err := compileSchema([]byte(`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object"}`)); err == nil {
		t.Error("a draft-04 schema compiled")
	}
	// Every keyword the generated schemas use compiles.
	if _, err := compileSchema([]byte(`{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x","title":"t",
		"description":"d","type":"object","additionalProperties":false,"required":["a"],"minProperties":1,"maxProperties":3,
		"properties":{"a":{"type":["string","null"],"minLength":1,"maxLength":3,"pattern":"^a","format":"date-time","default":"a",
		"enum":["a","b"],"const":"a","examples":["a"]},"b":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":2,
		"uniqueItems":true},"c":{"type":"integer","minimum":1,"maximum":2},"d":{"anyOf":[{"type":"number"}],"oneOf":[true],
		"allOf":[{}],"not":false},"e":false,"f":{"type":"object","propertyNames":{"maxLength":2},"additionalProperties":{"type":"boolean"}}}}`)); err != nil {
		t.Errorf("the keywords writerd uses: %v", err)
	}
}

// Ensure Define refuses a tool whose input schema uses a keyword the
// strict parse does not enforce.
func TestDefine_RefusesUnenforcedKeyword(t *testing.T) {
	_, err := Define(Spec[any, multipleIn, fuzzOut]{
		Name: "multiple",
		Run:  func(context.Context, *Op[any], *multipleIn) (*fuzzOut, error) { return &fuzzOut{}, nil },
	})
	if err == nil || !strings.Contains(err.Error(), "multipleOf") {
		t.Fatalf("Define = %v, want a refusal naming multipleOf", err)
	}
}

type multipleIn struct {
	Key
	N int `json:"n" jsonschema:"multipleOf=2"`
}

func (multipleIn) JSONSchemaExtend(*jsonschema.Schema) {}

// Ensure patterns of one ASCII class, matched without the regexp engine,
// match exactly what the engine matches.
func TestSimplePattern_AgreesWithRegexp(t *testing.T) {
	patterns := []string{`^[A-Za-z0-9._:-]+$`, `^[0-9A-HJKMNP-TV-Z]{26}$`, `^[A-Za-z0-9_.-]+$`, `^[a-z]*$`, `^[a-c]{2,3}$`, `^[^a]+$`, `^[a-z]+`, `[a-z]+$`, `^a+$`}
	alphabet := []rune("abcAZ09._:-/ \n\u00e9\u212a\U0001F600IOUL")
	rng := rand.New(rand.NewPCG(7, 8))
	for _, p := range patterns {
		re := regexp.MustCompile(p)
		sp := compileSimple(p)
		if sp == nil {
			continue // the engine matches it
		}
		for range 5000 {
			var b strings.Builder
			for range rng.IntN(30) {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			if s := b.String(); sp.match([]byte(s)) != re.MatchString(s) {
				t.Fatalf("pattern %s on %q: simple %v, regexp %v", p, s, sp.match([]byte(s)), re.MatchString(s))
			}
		}
	}
	if compileSimple(`^[A-Za-z0-9._:-]+$`) == nil || compileSimple(`^[0-9A-HJKMNP-TV-Z]{26}$`) == nil {
		t.Error("the key and id patterns take the engine")
	}
}

// Ensure isInteger decides as big.Rat does, whatever the number's double.
func TestIsInteger(t *testing.T) {
	for _, lit := range []string{
		"0", "-0", "1", "-1", "1.0", "1.5", "1e2", "1E+2", "1.5e1", "1.25e1", "15e-1", "150e-1", "0.0", "0e-999999999999",
		"1.0000000000000000001", "9007199254740990.5", "1e-1", "100e-2", "123.456e3", "123.456e2", "0.000e5", "-2.50e1",
	} {
		r, _ := new(big.Rat).SetString(lit)
		if got := isInteger([]byte(lit)); got != r.IsInt() {
			t.Errorf("isInteger(%s) = %v, want %v", lit, got, r.IsInt())
		}
	}
}
