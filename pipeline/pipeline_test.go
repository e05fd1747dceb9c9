package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline"
)

const marker = "zzSECRETzz"

func mustOK(t *testing.T, r *pipeline.Result) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("call failed: %s (%s): %v", r.Err.Code, r.Err.Message, r.Err.Err)
	}
}

func mustCode(t *testing.T, r *pipeline.Result, code pipeline.Code, retry pipeline.Retry) {
	t.Helper()
	if r.Err == nil {
		t.Fatalf("call succeeded, want %s", code)
	}
	if r.Err.Code != code || r.Err.Retry != retry {
		t.Fatalf("error = %s/%s (%s), want %s/%s", r.Err.Code, r.Err.Retry, r.Err.Message, code, retry)
	}
}

// Ensure an identical retry replays the first answer byte for byte and
// writes nothing more.
func TestCall_ReplaySameKey(t *testing.T) {
	e := MustEnv(t, nil)
	first := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a","count":1}`)
	mustOK(t, first)
	// Member order, whitespace and escapes do not change the request.
	again := e.call(alice, "put_note", "{ \"count\" : 1.0, \"text\":\"\\u0061\", \"idempotency_key\":\"k-00000001\" }")
	mustOK(t, again)
	if !again.Replayed || again.Outcome != pipeline.OutcomeReplayed {
		t.Fatalf("retry not replayed: %+v", again)
	}
	if !bytes.Equal(first.Output, again.Output) || first.AuditID != again.AuditID {
		t.Fatalf("replay differs:\n%s\n%s", first.Output, again.Output)
	}
	if n := e.notes(); n != 1 {
		t.Fatalf("notes = %d, want 1", n)
	}
	if n := len(e.events()); n != 1 {
		t.Fatalf("audit events = %d, want 1", n)
	}
}

// Ensure unexpected errors, panics and nil results become the fixed
// INTERNAL error that leaks nothing, are audited, and do not stop the next
// call.
func TestCall_InternalLeaksNothing(t *testing.T) {
	for _, fail := range []string{"error", "panic", "nil-result"} {
		t.Run(fail, func(t *testing.T) {
			e := MustEnv(t, nil)
			r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a","fail":"`+fail+`"}`)
			mustCode(t, r, pipeline.Internal, pipeline.RetryNewKey)
			body := string(r.ErrorJSON())
			if r.Err.Message != "Internal error." || strings.Contains(body, "secret") || strings.Contains(body, "panic") {
				t.Fatalf("internal error leaks: %s", body)
			}
			if r.Err.Err == nil {
				t.Fatal("the private cause is lost")
			}
			if e.notes() != 0 {
				t.Fatal("the failed write left a note")
			}
			evs := e.events()
			if len(evs) != 1 || evs[0].Code != "INTERNAL" {
				t.Fatalf("events = %+v", evs)
			}
			mustOK(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000002","text":"b"}`))
		})
	}
}

// failFailures is a storage fault: the audit log cannot append a failure.
type failFailures struct{ pipeline.Audit }

func (f failFailures) Append(e *auditlog.Event) error {
	if e.Outcome == auditlog.Failed {
		return errors.New("disk gone at /secret/path")
	}
	return f.Audit.Append(e)
}

// Ensure that when even the failure receipt cannot be saved, the client
// gets the fixed INTERNAL error, the key stays unused and nothing is left.
func TestCall_FailureReceiptLost(t *testing.T) {
	e := MustEnv(t, func(a pipeline.Audit) pipeline.Audit { return failFailures{a} })
	r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a","fail":"conflict"}`)
	mustCode(t, r, pipeline.Internal, pipeline.RetrySameKey)
	if r.Err.Message != pipeline.InternalMessage || strings.Contains(string(r.ErrorJSON()), "secret") {
		t.Fatalf("lost receipt leaks: %s", r.ErrorJSON())
	}
	mustLeaveNothing(t, e, "k-00000001")
}

// mustLeaveNothing checks that alice's write with key left no note, no
// event and no record, and that its one event counts as lost with its
// transaction.
func mustLeaveNothing(t *testing.T, e *env, key string) {
	t.Helper()
	if e.notes() != 0 || len(e.events()) != 0 || e.record("alice", key) != nil {
		t.Fatal("the failed write left something behind")
	}
	lost := `
# HELP writerd_audit_appends_total Audit events committed (result ok) and lost because their transaction failed (result failed).
# TYPE writerd_audit_appends_total counter
writerd_audit_appends_total{result="failed"} 1
`
	if err := testutil.GatherAndCompare(e.Reg, strings.NewReader(lost), "writerd_audit_appends_total"); err != nil {
		t.Fatal(err)
	}
}

// Ensure each class of bad input is rejected in stages 2–3 with its code,
// echoes no value, and leaves nothing: no note, no event, no key.
func TestCall_Rejections(t *testing.T) {
	// The depth limit holds before the schema is consulted, wherever the
	// nesting is.
	deep := `{"idempotency_key":"k-00000001","text":"a","meta":` + strings.Repeat(`{"a":[`, 8) + strings.Repeat(`]}`, 8) + `}`
	tests := []struct {
		name string
		args string
		code pipeline.Code
	}{
		{"unknown member", `{"idempotency_key":"k-00000001","text":"a","zzSECRETzz":1}`, pipeline.InvalidInput},
		{"wrong case", `{"idempotency_key":"k-00000001","Text":"zzSECRETzz"}`, pipeline.InvalidInput},
		{"duplicate member", `{"idempotency_key":"k-00000001","text":"zzSECRETzz","text":"b"}`, pipeline.InvalidInput},
		{"duplicate escaped", `{"idempotency_key":"k-00000001","text":"zzSECRETzz","t\u0065xt":"b"}`, pipeline.InvalidInput},
		{"integer 2^53", `{"idempotency_key":"k-00000001","text":"zzSECRETzz","count":9007199254740992}`, pipeline.InvalidInput},
		{"huge number", `{"idempotency_key":"k-00000001","text":"zzSECRETzz","count":1e400}`, pipeline.InvalidInput},
		{"underflow", `{"idempotency_key":"k-00000001","text":"zzSECRETzz","count":1e-400}`, pipeline.InvalidInput},
		{"deep nesting", deep, pipeline.InputTooLarge},
		{"oversize", `{"idempotency_key":"k-00000001","text":"` + strings.Repeat(marker, 20000) + `"}`, pipeline.InputTooLarge},
		{"string too long", `{"idempotency_key":"k-00000001","text":"` + strings.Repeat(marker, 10) + `"}`, pipeline.InputTooLarge},
		{"too many items", `{"idempotency_key":"k-00000001","text":"zzSECRETzz","tags":["a","b","c","d"]}`, pipeline.InputTooLarge},
		{"bad utf-8", "{\"idempotency_key\":\"k-00000001\",\"text\":\"zzSECRETzz\xff\"}", pipeline.InvalidInput},
		{"lone surrogate", `{"idempotency_key":"k-00000001","text":"zzSECRETzz\ud800"}`, pipeline.InvalidInput},
		{"wrong type", `{"idempotency_key":"k-00000001","text":"zzSECRETzz","count":"zzSECRETzz"}`, pipeline.InvalidInput},
		{"null", `{"idempotency_key":"k-00000001","text":"zzSECRETzz","count":null}`, pipeline.InvalidInput},
		{"trailing data", `{"idempotency_key":"k-00000001","text":"a"} {"zzSECRETzz":1}`, pipeline.InvalidInput},
		{"trailing garbage", `{"idempotency_key":"k-00000001","text":"a"}zzSECRETzz`, pipeline.InvalidInput},
		{"not an object", `["zzSECRETzz"]`, pipeline.InvalidInput},
		{"empty", ``, pipeline.InvalidInput},
		{"truncated", `{"idempotency_key":"k-00000001","text":"zzSECRETzz`, pipeline.InvalidInput},
		{"missing required", `{"idempotency_key":"k-00000001"}`, pipeline.InvalidInput},
		{"bad key", `{"idempotency_key":"zzSECRETzz!","text":"a"}`, pipeline.InvalidInput},
		{"short key", `{"idempotency_key":"k1","text":"zzSECRETzz"}`, pipeline.InvalidInput},
		{"enum", `{"idempotency_key":"k-00000001","text":"a","fail":"zzSECRETzz"}`, pipeline.InvalidInput},
		{"open object member name", `{"idempotency_key":"k-00000001","text":"a","meta":{"zzSECRETzz":1}}`, pipeline.InvalidInput},
		{"above maximum", `{"idempotency_key":"k-00000001","text":"a","count":1001}`, pipeline.InvalidInput},
	}
	e := MustEnv(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.call(alice, "put_note", tt.args)
			if r.Err == nil || r.Err.Code != tt.code {
				t.Fatalf("got %+v, want %s", r.Err, tt.code)
			}
			if r.Outcome != pipeline.OutcomeRejected {
				t.Fatalf("outcome = %s", r.Outcome)
			}
			if body := string(r.ErrorJSON()); strings.Contains(body, marker) || strings.Contains(body, "SECRET") {
				t.Fatalf("error echoes the input: %s", body)
			}
			if !strings.HasSuffix(r.Err.Message, ".") {
				t.Fatalf("message is not a sentence: %q", r.Err.Message)
			}
			if e.notes() != 0 || len(e.events()) != 0 || e.record("alice", "k-00000001") != nil {
				t.Fatal("a rejected call left something behind")
			}
		})
	}
}

// Ensure a message names the argument by pointer and the rule.
func TestCall_RejectionNamesArgumentAndRule(t *testing.T) {
	e := MustEnv(t, nil)
	tests := []struct{ args, want string }{
		{`{"idempotency_key":"k-00000001","text":"` + strings.Repeat("x", 51) + `"}`, "Argument /text must be at most 50 characters long (maxLength)."},
		{`{"idempotency_key":"k-00000001","Text":"a"}`, `differs from "text" only by case`},
		{`{"idempotency_key":"k-00000001","text":"a","tags":["a",1]}`, "Argument /tags/1 must be of type string (type)."},
		{`{"idempotency_key":"k-00000001","text":"a","text":"b"}`, "Argument /text is a duplicate member"},
		{`{"idempotency_key":"k-00000001"}`, `lacks the required member "text" (required)`},
		{`{"idempotency_key":"k-00000001","text":tru}`, "Argument /text is not valid JSON (syntax)."},
		{`{"idempotency_key":"k-00000001","zzSECRETzz":tru}`, "The arguments object is not valid JSON (syntax)."},
	}
	for _, tt := range tests {
		r := e.call(alice, "put_note", tt.args)
		if r.Err == nil || !strings.Contains(r.Err.Message, tt.want) {
			t.Errorf("%s: message %v, want it to contain %q", tt.args, r.Err, tt.want)
		}
	}
}

// Ensure a call whose key is held past the wait answers IN_USE and does not
// run.
func TestCall_KeyInUse(t *testing.T) {
	e := MustEnvWait(t, nil, 50*time.Millisecond)
	slow := make(chan *pipeline.Result)
	go func() { slow <- e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a","fail":"slow"}`) }()
	<-slowStarted // the first call holds the key until slowRelease
	r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a","fail":"slow"}`)
	slowRelease <- struct{}{}
	mustCode(t, r, pipeline.KeyInUse, pipeline.RetrySameKey)
	mustOK(t, <-slow)
	if e.notes() != 1 || len(e.events()) != 1 {
		t.Fatalf("notes %d events %d", e.notes(), len(e.events()))
	}
}

// Ensure an expired key is new again, and collection deletes it.
func TestCall_KeyExpires(t *testing.T) {
	e := MustEnv(t, nil)
	mustOK(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`))
	e.Advance(pipeline.DefaultKeyTTL)
	n, err := e.P.CollectKeys(context.Background())
	if err != nil || n != 1 || e.record("alice", "k-00000001") != nil {
		t.Fatalf("collected %d (%v), record still there: %v", n, err, e.record("alice", "k-00000001") != nil)
	}
	r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"b"}`)
	mustOK(t, r)
	if r.Replayed || e.notes() != 2 {
		t.Fatalf("expired key replayed=%v notes=%d", r.Replayed, e.notes())
	}
	// The first event's record is gone with its key; the check at the end
	// of the test sees only the second.
}

// Ensure scopes decide which tools a caller may use, and the refusal names
// the scope the tool needs.
func TestCall_PermissionDenied(t *testing.T) {
	e := MustEnv(t, nil)
	reader := pipeline.Caller{Principal: "r", Scopes: pipeline.ScopeRead, Transport: pipeline.TransportGo}
	writer := pipeline.Caller{Principal: "w", Scopes: pipeline.ScopeWrite | pipeline.ScopeAudit, Transport: pipeline.TransportGo}
	r := e.call(reader, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	mustCode(t, r, pipeline.PermissionDenied, pipeline.RetryNever)
	if !strings.HasSuffix(r.Err.Message, "it needs a token with the write scope.") {
		t.Errorf("a write denied: %q, want the write scope named", r.Err.Message)
	}
	if e.notes() != 0 || len(e.events()) != 0 {
		t.Fatal("a denied call left something behind")
	}
	r = e.call(writer, "get_note", `{"id":"nope"}`)
	mustCode(t, r, pipeline.PermissionDenied, pipeline.RetryNever)
	if !strings.HasSuffix(r.Err.Message, "it needs a token with the read scope.") {
		t.Errorf("a read denied: %q, want the read scope named", r.Err.Message)
	}
	r = e.call(reader, "get_note", `{"id":"nope"}`)
	mustCode(t, r, pipeline.NotFound, pipeline.RetryNever) // a read: the same call again cannot help
	if len(e.events()) != 0 {
		t.Fatal("a read wrote an audit event")
	}
}

// Ensure a read tool's errors carry retry hints that make sense for a call
// without a key: never where the same call again cannot help, same_key
// (the same call again) where it can; a write's keep the catalogue's.
func TestCall_ReadRetryHints(t *testing.T) {
	e := MustEnv(t, nil)
	for _, tt := range []struct {
		tool, args string
		code       pipeline.Code
		retry      pipeline.Retry
	}{
		{"get_note", `{"id":"nope"}`, pipeline.NotFound, pipeline.RetryNever},
		{"get_note", `{"id":5}`, pipeline.InvalidInput, pipeline.RetryNever},
		{"get_note", `{"id":"a","id":"b"}`, pipeline.InvalidInput, pipeline.RetryNever},
		{"put_note", `{"idempotency_key":"k-00000001","text":5}`, pipeline.InvalidInput, pipeline.RetryNewKey},
	} {
		mustCode(t, e.call(alice, tt.tool, tt.args), tt.code, tt.retry)
	}
}

// Ensure an unconfirmed destructive call previews and deletes nothing, and
// the same call confirmed deletes.
func TestCall_ConfirmationRequired(t *testing.T) {
	e := MustEnv(t, nil)
	put := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	mustOK(t, put)
	id := string(put.Output[len(`{"note":{"id":"`):][:26])
	r := e.call(alice, "delete_note", `{"idempotency_key":"k-00000002","id":"`+id+`"}`)
	mustCode(t, r, pipeline.ConfirmationRequired, pipeline.RetrySameKey)
	if !strings.Contains(string(r.ErrorJSON()), `"preview":{"deletes":"one note"}`) || r.Err.Status() != 428 {
		t.Fatalf("no preview: %s", r.ErrorJSON())
	}
	if e.notes() != 1 || len(e.events()) != 1 || e.record("alice", "k-00000002") != nil {
		t.Fatal("the preview deleted or recorded something")
	}
	mustOK(t, e.call(alice, "delete_note", `{"idempotency_key":"k-00000002","id":"`+id+`","confirm":true}`))
	if e.notes() != 0 || len(e.events()) != 2 {
		t.Fatalf("notes %d events %d", e.notes(), len(e.events()))
	}
}

// Ensure a closed store answers UNAVAILABLE and leaves the key unused.
func TestCall_StoreClosed(t *testing.T) {
	e := MustEnv(t, nil)
	e.Close()
	r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	mustCode(t, r, pipeline.Unavailable, pipeline.RetrySameKey)
	if r.Err.Status() != 503 || r.Outcome != pipeline.OutcomeError {
		t.Fatalf("status %d outcome %s", r.Err.Status(), r.Outcome)
	}
}

// unavailableAppends is a storage fault inside a write transaction: the
// store fails the audit append UNAVAILABLE, as a full disk does.
type unavailableAppends struct{ pipeline.Audit }

func (unavailableAppends) Append(*auditlog.Event) error {
	return pipeline.Wrap(pipeline.Unavailable, errors.New("disk full at /secret/path"), "The store is full; send the call again with the same key later.")
}

// Ensure a write the store fails UNAVAILABLE is answered so, retry
// same_key, records nothing (no receipt, no event), and counts its event
// as lost with its transaction.
func TestCall_WriteUnavailable(t *testing.T) {
	e := MustEnv(t, func(a pipeline.Audit) pipeline.Audit { return unavailableAppends{a} })
	r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	mustCode(t, r, pipeline.Unavailable, pipeline.RetrySameKey)
	if r.Outcome != pipeline.OutcomeError || r.AuditID != "" || strings.Contains(string(r.ErrorJSON()), "secret") {
		t.Fatalf("outcome %s, audit id %q: %s", r.Outcome, r.AuditID, r.ErrorJSON())
	}
	mustLeaveNothing(t, e, "k-00000001")
}

// Ensure an unknown tool is refused before anything runs.
func TestCall_UnknownTool(t *testing.T) {
	e := MustEnv(t, nil)
	r := e.call(alice, "nope", `{}`)
	mustCode(t, r, pipeline.NotFound, pipeline.RetryNewKey)
}
