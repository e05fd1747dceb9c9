package pipeline

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestUnbounded_SameRuleAsTheChecker: Unbounded's first place is where
// checkBounded refuses, and once each place is bounded nothing is left
// and the checker accepts.
func TestUnbounded_SameRuleAsTheChecker(t *testing.T) {
	raw := `{"type":"object","additionalProperties":false,"properties":{
		"a":{"type":"string"},"b":{"type":"array","items":{"$ref":"#/$defs/s"}},
		"c":{"type":"object","properties":{"d~/":{"type":["string","array"],"maxItems":3}}},
		"e":{"anyOf":[{"type":"string","enum":["x"]},{"type":"string"}]}},
		"$defs":{"s":{"type":"string"}}}`
	var tree map[string]any
	if err := json.Unmarshal([]byte(raw), &tree); err != nil {
		t.Fatal(err)
	}
	got, err := Unbounded(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	var ptrs []string
	for _, u := range got {
		ptrs = append(ptrs, u.Pointer+" "+u.Keyword)
	}
	want := "/properties/a maxLength|/properties/b maxItems|/$defs/s maxLength|/properties/c maxProperties|/properties/c/properties/d~0~1 maxLength|/properties/e/anyOf/1 maxLength"
	if strings.Join(ptrs, "|") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(ptrs, "|"), want)
	}
	err = checkBounded("", tree)
	if err == nil || !strings.Contains(err.Error(), got[0].Pointer+" ") {
		t.Fatalf("checkBounded: %v, want a refusal at %s", err, got[0].Pointer)
	}
	for _, u := range got {
		node, _ := resolvePointer(any(tree), u.Pointer)
		node.(map[string]any)[u.Keyword] = 10
	}
	if err := checkBounded("", tree); err != nil {
		t.Fatalf("bounded as Unbounded says, still refused: %v", err)
	}
	b, _ := json.Marshal(tree)
	if left, _ := Unbounded(b); len(left) != 0 {
		t.Fatalf("left: %v", left)
	}
}
