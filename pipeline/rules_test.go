package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/invopop/jsonschema"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline"
)

// Ensure a result that breaks the tool's own output schema is INTERNAL:
// nothing is committed but the failure receipt and exactly one failed
// event.
func TestCall_OutputSchemaEnforced(t *testing.T) {
	e := MustEnv(t, nil)
	r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a","fail":"bad-output"}`)
	mustCode(t, r, pipeline.Internal, pipeline.RetryNewKey)
	if e.notes() != 0 {
		t.Fatal("a result that breaks its schema was committed")
	}
	evs := e.events()
	if len(evs) != 1 || evs[0].Outcome != auditlog.Failed || evs[0].Code != string(pipeline.Internal) {
		t.Fatalf("events %+v, want one INTERNAL failure", evs)
	}
	if rec := e.record("alice", "k-00000001"); rec == nil || rec.Code != string(pipeline.Internal) || rec.Result != nil {
		t.Fatalf("record %+v, want the failure receipt", rec)
	}
}

// Ensure a handler cannot answer with the pipeline's own codes, nor with
// an INTERNAL of its own words: each reaches the client as INTERNAL with
// the fixed message, audited once.
func TestCall_HandlerCannotUsePipelineCodes(t *testing.T) {
	for _, fail := range []string{"invalid-input", "key-reused", "permission-denied", "internal-secret"} {
		t.Run(fail, func(t *testing.T) {
			e := MustEnv(t, nil)
			r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a","fail":"`+fail+`"}`)
			mustCode(t, r, pipeline.Internal, pipeline.RetryNewKey)
			if r.Err.Message != pipeline.InternalMessage || strings.Contains(string(r.ErrorJSON()), "secret") {
				t.Fatalf("the answer is %s, want the fixed INTERNAL", r.ErrorJSON())
			}
			if evs := e.events(); len(evs) != 1 || evs[0].Code != string(pipeline.Internal) {
				t.Fatalf("events %+v, want one INTERNAL", evs)
			}
		})
	}
}

// Ensure Public lets no custom INTERNAL message through.
func TestPublic_InternalMessageFixed(t *testing.T) {
	e := pipeline.Public(pipeline.Errorf(pipeline.Internal, "secret at /var/lib"))
	if e.Code != pipeline.Internal || e.Message != pipeline.InternalMessage {
		t.Fatalf("Public = %s %q, want INTERNAL %q", e.Code, e.Message, pipeline.InternalMessage)
	}
}

// Ensure the byte and depth limits hold at their edge: arguments of exactly
// the limit are accepted, one more is refused with INPUT_TOO_LARGE.
func TestCall_LimitEdges(t *testing.T) {
	lim := pipeline.Limits{MaxBytes: 120, MaxDepth: 2}
	e := MustEnvConfig(t, func(c *pipeline.Config[notes]) { c.Limits = lim })
	pad := func(args string, size int) string {
		return args[:len(args)-1] + strings.Repeat(" ", size-len(args)) + "}"
	}
	tests := []struct {
		name, args string
		code       pipeline.Code // "" accepted
	}{
		{"bytes at the limit", pad(`{"idempotency_key":"k-00000001","text":"a"}`, lim.MaxBytes), ""},
		{"bytes one past", pad(`{"idempotency_key":"k-00000002","text":"a"}`, lim.MaxBytes+1), pipeline.InputTooLarge},
		{"depth at the limit", `{"idempotency_key":"k-00000003","text":"a","tags":["x"]}`, ""},
		{"depth one past", `{"idempotency_key":"k-00000004","text":"a","tags":[["x"]]}`, pipeline.InputTooLarge},
		{"depth one past, object", `{"idempotency_key":"k-00000005","text":"a","meta":{"a":{}}}`, pipeline.InputTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.call(alice, "put_note", tt.args)
			if tt.code == "" {
				mustOK(t, r)
				return
			}
			mustCode(t, r, tt.code, pipeline.RetryNewKey)
		})
	}
	if e.notes() != 2 {
		t.Fatalf("notes %d, want the 2 accepted", e.notes())
	}
}

// Ensure a number too small to represent is refused where only the
// underflow check can refuse it: a number-typed member whose bounds 0
// would meet.
func TestCall_UnderflowRefused(t *testing.T) {
	e := MustEnv(t, nil)
	for _, n := range []string{"1e-400", "-1e-400", "0." + strings.Repeat("0", 400) + "1"} {
		r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a","score":`+n+`}`)
		mustCode(t, r, pipeline.InvalidInput, pipeline.RetryNewKey)
	}
	mustOK(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a","score":0e-400}`))
}

// Ensure read tools need the read scope: a caller with write alone is
// denied a read.
func TestCall_ReadNeedsReadScope(t *testing.T) {
	e := MustEnv(t, nil)
	writer := pipeline.Caller{Principal: "w", Scopes: pipeline.ScopeWrite, Transport: pipeline.TransportGo}
	r := e.call(writer, "get_note", `{"id":"x"}`)
	mustCode(t, r, pipeline.PermissionDenied, pipeline.RetryNever)
}

// modeIn has a schema with "not" and a false subschema, which the
// validator reports with an empty keyword path.
type modeIn struct {
	pipeline.Key
	Mode  string  `json:"mode" jsonschema:"maxLength=10"`
	Never *string `json:"never,omitempty" jsonschema:"maxLength=10"`
}

func (modeIn) JSONSchemaExtend(s *jsonschema.Schema) {
	mode, _ := s.Properties.Get("mode")
	mode.Not = &jsonschema.Schema{Const: "forbidden"}
	s.Properties.Set("never", jsonschema.FalseSchema)
}

// Ensure schemas using "not" and a false subschema reject with
// INVALID_INPUT and a sentence, without a panic, and accept what they
// allow.
func TestCall_NotAndFalseSchemas(t *testing.T) {
	e := MustEnv(t, nil)
	tool := pipeline.MustDefine(pipeline.Spec[notes, modeIn, noteOut]{
		Name: "set_mode", Description: "Sets a mode.",
		Run: func(context.Context, *pipeline.Op[notes], *modeIn) (*noteOut, error) { return &noteOut{}, nil },
	})
	if err := e.P.Register(tool); err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{
		`{"idempotency_key":"k-00000001","mode":"forbidden"}`,
		`{"idempotency_key":"k-00000001","mode":"ok","never":"x"}`,
	} {
		var r *pipeline.Result
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s: panic %v", args, p)
				}
			}()
			r = e.call(alice, "set_mode", args)
		}()
		mustCode(t, r, pipeline.InvalidInput, pipeline.RetryNewKey)
		if !strings.HasSuffix(r.Err.Message, ".") || strings.Contains(r.Err.Message, "forbidden") {
			t.Errorf("%s: message %q", args, r.Err.Message)
		}
	}
	mustOK(t, e.call(alice, "set_mode", `{"idempotency_key":"k-00000001","mode":"ok"}`))
}

// Ensure the advertised schema says what the strict parse enforces of
// integers: an integer without bounds of its own is advertised with
// ±(2^53−1), and one past them is refused.
func TestDefine_IntegersAdvertiseSafeBounds(t *testing.T) {
	type in struct {
		pipeline.Key
		N int64 `json:"n" jsonschema_description:"Any integer."`
		M int   `json:"m,omitempty" jsonschema:"minimum=1,maximum=5" jsonschema_description:"A small one."`
	}
	tool := pipeline.MustDefine(pipeline.Spec[notes, in, noteOut]{
		Name: "count", Description: "Counts.",
		Run: func(context.Context, *pipeline.Op[notes], *in) (*noteOut, error) { return &noteOut{}, nil },
	})
	var schema struct {
		Properties map[string]struct {
			Minimum, Maximum json.Number
		}
	}
	if err := json.Unmarshal(tool.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	n, m := schema.Properties["n"], schema.Properties["m"]
	if n.Minimum != "-9007199254740991" || n.Maximum != "9007199254740991" {
		t.Errorf("n advertised within [%s, %s], want ±(2^53−1)", n.Minimum, n.Maximum)
	}
	if m.Minimum != "1" || m.Maximum != "5" {
		t.Errorf("m advertised within [%s, %s], want its own [1, 5]", m.Minimum, m.Maximum)
	}
	e := MustEnv(t, nil)
	if err := e.P.Register(tool); err != nil {
		t.Fatal(err)
	}
	mustOK(t, e.call(alice, "count", `{"idempotency_key":"k-00000001","n":-9007199254740991}`))
	mustCode(t, e.call(alice, "count", `{"idempotency_key":"k-00000002","n":9007199254740992}`), pipeline.InvalidInput, pipeline.RetryNewKey)
}

// Ensure an integer past ±(2^53−1) in a float-typed member with no bounds
// of its own, where no schema maximum refuses it, is refused by the
// strict parse with INVALID_INPUT, and nothing is written: as a double it
// would be stored as another number. A float within precision is taken.
func TestCall_FloatMemberPastDoublePrecision(t *testing.T) {
	e := MustEnv(t, nil)
	for i, n := range []string{"9007199254740993", "-9007199254740993", "9007199254740992", "9007199254740993.0", "1e300"} {
		key := fmt.Sprintf("k-%08d", i)
		r := e.call(alice, "put_note", `{"idempotency_key":"`+key+`","text":"a","weight":`+n+`}`)
		mustCode(t, r, pipeline.InvalidInput, pipeline.RetryNewKey)
		if !strings.Contains(r.Err.Message, "/weight") || strings.Contains(r.Err.Message, n) {
			t.Errorf("weight %s: %q, want the member named and the number not quoted", n, r.Err.Message)
		}
		if e.notes() != 0 || len(e.events()) != 0 || e.record("alice", key) != nil {
			t.Fatalf("weight %s was refused but wrote something", n)
		}
	}
	mustOK(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000100","text":"a","weight":9007199254740991.0}`))
	mustOK(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000101","text":"a","weight":-0.5}`))
}
