package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// UnboundedAt is one place where a schema leaves a string, an array or an
// open object without an upper bound: Pointer (RFC 6901, into the schema)
// and the Keyword that would bound it ("maxLength", "maxItems" or
// "maxProperties").
type UnboundedAt struct {
	Pointer string
	Keyword string
}

// Unbounded lists, in the order the checker meets them and once each,
// every place of schema that the checker of DefineExternal refuses as
// unbounded, by the same rule and at the same pointer as its refusal
// names (through local $refs, at the definition's pointer), so that a
// bound set there satisfies it. The root is checked as it is given:
// DefineExternal closes an upstream's root itself.
func Unbounded(schema json.RawMessage) ([]UnboundedAt, error) {
	var root map[string]any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	var out []UnboundedAt
	seen := map[UnboundedAt]bool{}
	add := func(at, kw string) {
		u := UnboundedAt{Pointer: at, Keyword: kw}
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	if err := unboundedNode(root, "", root, 0, add); err != nil {
		return nil, err
	}
	return out, nil
}

// unboundedNode is boundedNode (tool.go) collecting instead of refusing.
func unboundedNode(root map[string]any, at string, s map[string]any, depth int, add func(at, kw string)) error {
	if depth > maxSubschemas {
		return errors.New("schema nested too deep")
	}
	if ref, ok := s["$ref"].(string); ok {
		ptr := strings.TrimPrefix(ref, "#")
		target, _ := resolvePointer(any(root), ptr)
		m, ok := target.(map[string]any)
		if !ok {
			return nil
		}
		return unboundedNode(root, ptr, m, depth+1, add)
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
	has := func(kw string) bool { _, ok := s[kw]; return ok }
	if types["string"] && !has("maxLength") && !has("enum") && !has("const") {
		add(at, "maxLength")
	}
	if types["array"] && !has("maxItems") {
		add(at, "maxItems")
	}
	if types["object"] && s["additionalProperties"] != false && !has("maxProperties") {
		add(at, "maxProperties")
	}
	for _, kw := range []string{"items", "additionalProperties", "propertyNames"} {
		if sub, ok := s[kw].(map[string]any); ok {
			if err := unboundedNode(root, at+"/"+kw, sub, depth+1, add); err != nil {
				return err
			}
		}
	}
	for _, kw := range []string{"anyOf", "oneOf", "allOf"} {
		subs, _ := s[kw].([]any)
		for i, sub := range subs {
			if m, ok := sub.(map[string]any); ok {
				if err := unboundedNode(root, fmt.Sprintf("%s/%s/%d", at, kw, i), m, depth+1, add); err != nil {
					return err
				}
			}
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for _, name := range slices.Sorted(maps.Keys(props)) {
			if m, ok := props[name].(map[string]any); ok {
				if err := unboundedNode(root, at+"/properties/"+escapePointer.Replace(name), m, depth+1, add); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
