package mcp_test

import (
	"bytes"
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
)

const (
	reqID   = "01JGHJ0QZ5AAAAAAAAAAAAAAAA"
	auditID = "01JGHJ0QZ5BBBBBBBBBBBBBBBB"
)

// render renders res and marshals it as the SDK puts it on the wire.
func render(t testing.TB, res *pipeline.Result) (*sdk.CallToolResult, wire) {
	t.Helper()
	r := mcp.Render(res)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return r, decodeWire(t, b)
}

// Ensure a success carries the structured result and, byte for byte, the
// same JSON as its one text block; _meta names the request and the audit
// event, and says writerd/replayed only on a replay.
func TestRender_Success(t *testing.T) {
	out := []byte(`{"project":{"name":"a","labels":["x"],"revision":1}}`)
	tests := []struct {
		name string
		res  pipeline.Result
		meta []string
	}{
		{"write", pipeline.Result{Outcome: pipeline.OutcomeOK, AuditID: auditID}, []string{mcp.MetaAuditID}},
		{"replay", pipeline.Result{Outcome: pipeline.OutcomeReplayed, AuditID: auditID, Replayed: true}, []string{mcp.MetaAuditID, mcp.MetaReplayed}},
		{"read", pipeline.Result{Outcome: pipeline.OutcomeOK}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.res
			res.RequestID, res.Output = reqID, out
			r, w := render(t, &res)
			if sc, ok := r.StructuredContent.(json.RawMessage); !ok || !bytes.Equal(sc, out) {
				t.Errorf("structuredContent = %#v, want the output bytes themselves", r.StructuredContent)
			}
			if got := MustSucceed(t, w, tt.meta...); !bytes.Equal(got, out) {
				t.Errorf("structuredContent on the wire = %s, want %s", got, out)
			}
			if w.Meta[mcp.MetaRequestID] != reqID || (res.AuditID != "" && w.Meta[mcp.MetaAuditID] != auditID) {
				t.Errorf("_meta = %v, want request %s, audit %q", w.Meta, reqID, res.AuditID)
			}
		})
	}
}

// Ensure a failure is isError with exactly one text block holding the
// envelope, no structured result, and the audit id only if one was written.
func TestRender_Failure(t *testing.T) {
	tests := []struct {
		name string
		res  pipeline.Result
		meta []string
	}{
		{"refused, audited", pipeline.Result{Outcome: pipeline.OutcomeRefused, AuditID: auditID,
			Err: pipeline.Errorf(pipeline.AlreadyExists, "A project with this name exists.")}, []string{mcp.MetaAuditID}},
		{"rejected", pipeline.Result{Outcome: pipeline.OutcomeRejected,
			Err: pipeline.Errorf(pipeline.InvalidInput, "The member /name is required.")}, nil},
		// Replayed is never set with Err; were it, the error must still win.
		{"conflict", pipeline.Result{Outcome: pipeline.OutcomeConflict, Replayed: true, Output: []byte(`{"x":1}`),
			Err: pipeline.Errorf(pipeline.KeyReused, "Used for a different request.")}, nil},
		{"internal", pipeline.Result{Outcome: pipeline.OutcomeError,
			Err: pipeline.Public(errRaw)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := tt.res
			res.RequestID = reqID
			r, w := render(t, &res)
			if r.StructuredContent != nil {
				t.Errorf("structuredContent = %v, want none", r.StructuredContent)
			}
			e := MustFail(t, w, res.Err.Code, tt.meta...)
			if e.Message != res.Err.Message || e.Retry != res.Err.Retry || e.RequestID != reqID {
				t.Errorf("envelope %+v, want message %q, retry %s, request %s", e, res.Err.Message, res.Err.Retry, reqID)
			}
			if text := w.Texts[0]; text != string(res.ErrorJSON()) {
				t.Errorf("text = %s, want exactly %s", text, res.ErrorJSON())
			}
			if bytes.Contains(w.Raw, []byte("secret")) {
				t.Errorf("result shows the private cause: %s", w.Raw)
			}
		})
	}
}

// errRaw is an internal error whose text must never reach a client.
var errRaw = rawError(`open /var/lib/writerd/writerd.db: secret`)

type rawError string

func (e rawError) Error() string { return string(e) }
