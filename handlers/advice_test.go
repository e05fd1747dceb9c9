package handlers_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// Ensure every write tool tells a model, in its description and in its
// idempotency_key's, to send the same key when retrying the same call and
// a new key for a new operation (models mint a fresh key on each retry
// unless told otherwise); and that no read tool speaks of a key.
func TestTools_SayToKeepTheKeyOnRetry(t *testing.T) {
	for _, tool := range handlers.Tools() {
		var schema struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(tool.InputSchema, &schema); err != nil {
			t.Fatal(err)
		}
		key, hasKey := schema.Properties["idempotency_key"]
		if tool.ReadOnly {
			if hasKey || strings.Contains(tool.Description, pipeline.RetryAdvice) {
				t.Errorf("%s: a read tool speaks of a key", tool.Name)
			}
			continue
		}
		if !strings.HasSuffix(tool.Description, " "+pipeline.RetryAdvice) {
			t.Errorf("%s: the description does not end with the retry advice: %q", tool.Name, tool.Description)
		}
		if !strings.Contains(key.Description, "After an error or a timeout, send the same call again with this same key; use a new key only for a new operation.") {
			t.Errorf("%s: idempotency_key's description: %q", tool.Name, key.Description)
		}
	}
}
