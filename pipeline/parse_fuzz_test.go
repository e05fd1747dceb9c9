package pipeline

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/writerd/writerd/digest"
)

type fuzzIn struct {
	Key
	Name  string   `json:"name" jsonschema:"minLength=1,maxLength=20"`
	Count *int     `json:"count,omitempty" jsonschema:"minimum=-5,maximum=5"`
	Tags  []string `json:"tags,omitempty" jsonschema:"maxItems=3,maxLength=5"`
	Flag  *bool    `json:"flag,omitempty"`
}

type fuzzOut struct {
	OK bool `json:"ok"`
}

// FuzzParse asserts what the strict parse promises for any input: it never
// panics; a rejection is INVALID_INPUT or INPUT_TOO_LARGE with a sentence
// that echoes no input; an accepted input is one valid JSON object without
// duplicate members, within the limits, whose request digest exists.
func FuzzParse(f *testing.F) {
	tool := MustDefine(Spec[any, fuzzIn, fuzzOut]{
		Name: "fuzz",
		Run:  func(_ context.Context, _ *Op[any], _ *fuzzIn) (*fuzzOut, error) { return &fuzzOut{}, nil },
	})
	lim := Limits{MaxBytes: 4 << 10, MaxDepth: 4}
	for _, s := range []string{
		`{"idempotency_key":"k-00000001","name":"a"}`,
		`{"idempotency_key":"k-00000001","name":"a","count":3,"tags":["x"],"flag":true}`,
		`{"idempotency_key":"k-00000001","name":"a","name":"b"}`,
		`{"idempotency_key":"k-00000001","Name":"a"}`,
		`{"idempotency_key":"k-00000001","name":"\ud800"}`,
		`{"idempotency_key":"k-00000001","name":"a","count":9007199254740993}`,
		`{"idempotency_key":"k-00000001","name":"a","tags":[[[[[]]]]]}`,
		`{"idempotency_key":"k-00000001","name":"a"} x`,
		"{\"idempotency_key\":\"k-00000001\",\"name\":\"\xff\"}",
		`{"idempotency_key":"k-00000001","name":"a","count":1e-400}`,
		`{"idempotency_key":"k-00000001","name":"a","count":-0.0}`,
		`[]`, ``, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		in, canonical, err := tool.parse(args, lim)
		if err != nil {
			e, ok := err.(*Error)
			if !ok || (e.Code != InvalidInput && e.Code != InputTooLarge) {
				t.Fatalf("parse error %T %v is not a rejection", err, err)
			}
			if !strings.HasSuffix(e.Message, ".") || strings.ContainsAny(e.Message, "\x00\xff") {
				t.Fatalf("message %q is not a clean sentence", e.Message)
			}
			return
		}
		if in == nil || len(args) > lim.MaxBytes {
			t.Fatalf("accepted %q beyond the limits or without a value", args)
		}
		v := jsontext.Value(bytes.Clone(args))
		if !v.IsValid() || v.Kind() != '{' {
			t.Fatalf("accepted invalid JSON %q", args)
		}
		if c, err := digest.Canonical(args); err != nil || !bytes.Equal(c, canonical.Bytes()) {
			t.Fatalf("accepted %q but its canonical form %q is not Canonical's %q: %v", args, canonical.Bytes(), c, err)
		}
	})
}
