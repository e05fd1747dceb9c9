package pipeline_test

import (
	"testing"

	"github.com/writerd/writerd/pipeline"
)

// builtinSeeds are arguments near the rules of the built-in tools' schemas.
var builtinSeeds = []string{
	`{"idempotency_key":"k-00000001","name":"a","description":"d","labels":["x","y"]}`,
	`{"idempotency_key":"k-00000001","name":"","labels":[""]}`,
	`{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","title":"t","body":"b","fields":{"a":"x","b":1.5,"c":true}}`,
	`{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","title":"t","fields":{"a b":1,"c":null,"d":[1]}}`,
	`{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","title":"t","fields":{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa":1}}`,
	`{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","record_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","expected_revision":1,"locked":false,"fields":{}}`,
	`{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","expected_revision":0.5}`,
	`{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","record_ids":["01JGHJ0QZ5BBBBBBBBBBBBBBBB","01JGHJ0QZ5BBBBBBBBBBBBBBBB"],"confirm":true}`,
	`{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","filter":{"fields":{"a":1},"title_prefix":"x","created_after":"2026-01-02T15:04:05Z","locked":true}}`,
	`{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB","filter":{},"record_ids":[]}`,
	`{"idempotency_key":"k-00000001","project_id":"01JGHJ0QZ5BBBBBBBBBBBBBBBB"}`,
	`{"limit":100,"cursor":"01JGHJ0QZ5BBBBBBBBBBBBBBBB"}`,
	`{"limit":0}`, `{"limit":1.0}`, `{"limit":101}`, `{}`,
}

// Ensure the strict parse agrees with the reference validator on the
// built-in tools' arguments: the same verdict, and a refusal's same code.
func FuzzCheck_BuiltinTools(f *testing.F) {
	tools := builtinInfos()
	for i := range tools {
		for _, s := range builtinSeeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	lim := pipeline.Limits{MaxBytes: 8 << 10, MaxDepth: 6}
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		pipeline.AgreeWithReference(t, tools[int(which)%len(tools)], args, lim)
	})
}
