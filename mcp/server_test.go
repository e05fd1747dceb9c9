package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
)

// Ensure a write, its replay, a refusal and a rejection reach the client in
// the shapes of docs/DESIGN.md section 3, and that the audit ids in _meta name
// the events the writes left: one per write, none for a replay or a
// rejection.
func TestCall_Shapes(t *testing.T) {
	s := MustServe(t)
	args := `{"idempotency_key":"` + key(1) + `","name":"alpha","labels":["x"]}`

	first := s.Call("create_project", args)
	out := MustSucceed(t, first, mcp.MetaAuditID)
	again := s.Call("create_project", args)
	if replay := MustSucceed(t, again, mcp.MetaAuditID, mcp.MetaReplayed); !bytes.Equal(replay, out) {
		t.Errorf("replay = %s, want the first answer byte for byte: %s", replay, out)
	}
	if again.Meta[mcp.MetaAuditID] != first.Meta[mcp.MetaAuditID] || again.Meta[mcp.MetaRequestID] == first.Meta[mcp.MetaRequestID] {
		t.Errorf("replay _meta %v, want the first audit id and a new request id (first: %v)", again.Meta, first.Meta)
	}

	taken := s.Call("create_project", `{"idempotency_key":"`+key(2)+`","name":"alpha"}`)
	e := MustFail(t, taken, pipeline.AlreadyExists, mcp.MetaAuditID)
	if e.Retry != pipeline.RetryNewKey {
		t.Errorf("retry %s, want new_key", e.Retry)
	}

	MustFail(t, s.Call("create_project", `{"idempotency_key":"`+key(3)+`","name":"a","name":"b"}`), pipeline.InvalidInput)
	MustFail(t, s.Call("create_project", `{"idempotency_key":"`+key(1)+`","name":"beta"}`), pipeline.KeyReused)

	evs := s.AuditEvents()
	if len(evs) != 2 {
		t.Fatalf("audit events = %d, want 2 (the write and the refusal)", len(evs))
	}
	for i, w := range []wire{first, taken} {
		ev := evs[i]
		if w.Meta[mcp.MetaAuditID] != ev.ID || ev.IdempotencyKey != key(i+1) || ev.RequestID != w.Meta[mcp.MetaRequestID] {
			t.Errorf("event %+v, want the one _meta %v names", ev, w.Meta)
		}
	}
	if evs[0].Outcome != auditlog.OK || evs[1].Outcome != auditlog.Failed || evs[1].Code != string(pipeline.AlreadyExists) {
		t.Errorf("outcomes %s, %s (%s), want ok, failed (ALREADY_EXISTS)", evs[0].Outcome, evs[1].Outcome, evs[1].Code)
	}
	if evs[0].Transport != pipeline.TransportStdio || evs[0].Principal != "local" {
		t.Errorf("event caller %s/%s, want the CallerFunc's local/stdio", evs[0].Principal, evs[0].Transport)
	}
}

// Ensure a read answers without an audit id, and that a call without
// arguments is a call with {}.
func TestCall_Read(t *testing.T) {
	s := MustServe(t)
	MustSucceed(t, s.Call("create_project", `{"idempotency_key":"`+key(1)+`","name":"alpha"}`), mcp.MetaAuditID)
	var got struct{ Projects []struct{ Name string } }
	if err := json.Unmarshal(MustSucceed(t, s.Call("list_projects", "")), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Projects) != 1 || got.Projects[0].Name != "alpha" {
		t.Errorf("projects %+v, want alpha", got.Projects)
	}
	MustFail(t, s.Call("create_project", ""), pipeline.InvalidInput)
}

// Ensure tools/list advertises every registered tool with the very schemas
// the strict parse enforces and truthful annotations, and that an unknown
// tool stays a JSON-RPC error.
func TestListTools(t *testing.T) {
	s := MustServe(t)
	if _, err := s.session.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	type listed struct {
		Name                      string
		InputSchema, OutputSchema json.RawMessage
		Annotations               struct{ ReadOnlyHint, DestructiveHint *bool }
	}
	var list struct{ Tools []listed }
	if err := json.Unmarshal(s.frames.lastRead(t), &list); err != nil {
		t.Fatal(err)
	}
	want := s.p.Tools()
	if len(list.Tools) != len(want) {
		t.Fatalf("tools/list has %d tools, want %d", len(list.Tools), len(want))
	}
	for _, pt := range want {
		i := slices.IndexFunc(list.Tools, func(lt listed) bool { return lt.Name == pt.Name })
		if i < 0 {
			t.Errorf("tools/list lacks %s", pt.Name)
			continue
		}
		lt := list.Tools[i]
		if !sameJSON(lt.InputSchema, pt.InputSchema) || !sameJSON(lt.OutputSchema, pt.OutputSchema) {
			t.Errorf("%s: advertised schemas differ from the enforced ones", pt.Name)
		}
		ro, de := lt.Annotations.ReadOnlyHint, lt.Annotations.DestructiveHint
		if want := pt.Destructive || pt.Overwrites; (ro != nil && *ro) != pt.ReadOnly || (!pt.ReadOnly && (de == nil || *de != want)) {
			t.Errorf("%s: readOnlyHint %v destructiveHint %v, want %v, %v", pt.Name, ro, de, pt.ReadOnly, want)
		}
	}

	_, err := s.session.CallTool(context.Background(), &sdk.CallToolParams{Name: "no_such_tool", Arguments: json.RawMessage(`{}`)})
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) {
		t.Errorf("unknown tool: err = %v, want a JSON-RPC error", err)
	}
}

func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// Ensure a panic in a method handler reaches the client as the fixed
// INTERNAL answer (a tools/call) or JSON-RPC internal error (any other
// method), never its text, goes to the log with the request id the client
// saw, and leaves the server serving.
func TestRecoverPanics(t *testing.T) {
	// A method handler that panics on ping, inside the server's own
	// middleware.
	panicOnPing := func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "ping" {
				panic("secret")
			}
			return next(ctx, method, req)
		}
	}
	s := MustServeMiddleware(t, []sdk.Middleware{panicOnPing}, func(srv *sdk.Server) {
		srv.AddTool(&sdk.Tool{Name: "boom", InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { panic("secret") })
	})

	w := s.Call("boom", `{}`)
	e := MustFail(t, w, pipeline.Internal)
	if e.Message != pipeline.InternalMessage || e.Retry != pipeline.RetrySameKey {
		t.Errorf("envelope %+v, want %q, same_key", e, pipeline.InternalMessage)
	}
	MustSucceed(t, s.Call("create_project", `{"idempotency_key":"`+key(1)+`","name":"alpha"}`), mcp.MetaAuditID)

	err := s.session.Ping(context.Background(), nil)
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInternalError || rpc.Message != pipeline.InternalMessage {
		t.Errorf("ping: err = %#v, want JSON-RPC internal error %q", err, pipeline.InternalMessage)
	}
	MustSucceed(t, s.Call("create_project", `{"idempotency_key":"`+key(2)+`","name":"beta"}`), mcp.MetaAuditID)

	for _, f := range s.frames.all() {
		if strings.Contains(f, "secret") {
			t.Errorf("the client saw the panic: %s", f)
		}
	}
	log := s.log.String()
	if !strings.Contains(log, `"request_id":"`+e.RequestID+`"`) || !strings.Contains(log, "secret") {
		t.Errorf("log lacks the panic under request id %s:\n%s", e.RequestID, log)
	}
	if n := len(s.AuditEvents()); n != 2 {
		t.Errorf("audit events = %d, want 2 (the panics wrote none)", n)
	}
}

// Ensure every dispatched write leaves exactly one audit event, and
// replays, conflicts and rejections none, counted after a scripted run
// over MCP.
func TestAudit_OneEventPerDispatchedWrite(t *testing.T) {
	s := MustServe(t)
	calls := []struct {
		tool, args string
		dispatched bool
	}{
		{"create_project", `{"idempotency_key":"` + key(1) + `","name":"alpha"}`, true},                             // ok
		{"create_project", `{"idempotency_key":"` + key(1) + `","name":"alpha"}`, false},                            // replay
		{"create_project", `{"idempotency_key":"` + key(1) + `","name":"beta"}`, false},                             // reused
		{"create_project", `{"idempotency_key":"` + key(2) + `","name":"alpha"}`, true},                             // refused: ALREADY_EXISTS
		{"create_project", `{"idempotency_key":"` + key(2) + `","name":"alpha"}`, false},                            // KEY_FAILED
		{"create_project", `{"idempotency_key":"` + key(3) + `","name":"a","x":1}`, false},                          // rejected
		{"create_project", `{"idempotency_key":"` + key(4) + `","name":"` + strings.Repeat("n", 101) + `"}`, false}, // too large
		{"list_projects", `{}`, false}, // a read
		{"create_project", `{"idempotency_key":"` + key(5) + `","name":"gamma"}`, true}, // ok
	}
	want := 0
	for _, c := range calls {
		s.Call(c.tool, c.args)
		if c.dispatched {
			want++
		}
	}
	if n := len(s.AuditEvents()); n != want {
		t.Fatalf("%d audit events after %d dispatched writes", n, want)
	}
}
