package pipeline_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/pipeline"
)

// nothing is an External that must never be called.
type nothing struct{ t *testing.T }

func (n nothing) Slot(context.Context, time.Duration) (func(), error) { return func() {}, nil }
func (n nothing) Send(context.Context, *pipeline.ExternalCall) *pipeline.ExternalAnswer {
	n.t.Error("the upstream was called")
	return nil
}

// Ensure an upstream's schema is closed as writerd's own are, nested
// objects too (not allOf's members, which see the whole object), with the
// key added and required, and that a schema defining writerd's own member
// is refused.
func TestDefineExternal_Schema(t *testing.T) {
	in := `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{
		"entities":{"type":"array","maxItems":5,"items":{"type":"object","properties":{"name":{"type":"string","maxLength":10}},"required":["name"]}},
		"both":{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"maxProperties":2},{"type":"object","properties":{"b":{"type":"integer"}},"maxProperties":2}]}},
		"required":["entities"]}`
	tool, err := pipeline.DefineExternal[struct{}](pipeline.ExternalSpec{
		Name: "ext", InputSchema: json.RawMessage(in), OutputSchema: json.RawMessage(`{"type":"object"}`), External: nothing{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties map[string]struct {
			Items struct {
				AdditionalProperties *bool `json:"additionalProperties"`
			} `json:"items"`
			AllOf []map[string]any `json:"allOf"`
		} `json:"properties"`
		Required             []string `json:"required"`
		AdditionalProperties *bool    `json:"additionalProperties"`
	}
	if err := json.Unmarshal(tool.InputSchema, &s); err != nil {
		t.Fatal(err)
	}
	if s.AdditionalProperties == nil || *s.AdditionalProperties || s.Properties["entities"].Items.AdditionalProperties == nil || *s.Properties["entities"].Items.AdditionalProperties {
		t.Errorf("schema %s: want the root and the entities' items closed", tool.InputSchema)
	}
	if _, closed := s.Properties["both"].AllOf[0]["additionalProperties"]; closed {
		t.Errorf("schema %s: an allOf member was closed", tool.InputSchema)
	}
	if !strings.Contains(strings.Join(s.Required, ","), "idempotency_key") {
		t.Errorf("required %v: want idempotency_key", s.Required)
	}
	_, err = pipeline.DefineExternal[struct{}](pipeline.ExternalSpec{
		Name: "ext", InputSchema: json.RawMessage(`{"type":"object","properties":{"idempotency_key":{"type":"string","maxLength":5}}}`),
		OutputSchema: json.RawMessage(`{"type":"object"}`), External: nothing{t},
	})
	if err == nil || !strings.Contains(err.Error(), "idempotency_key") {
		t.Errorf("a schema defining idempotency_key: %v, want it refused", err)
	}
}
