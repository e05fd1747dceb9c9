package mcp_test

import (
	"strings"
	"testing"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// Ensure a tool unregistered while a session runs is gone from it: the
// session (here of a protocol before 2026-07-28, which needs no
// subscription) gets notifications/tools/list_changed, tools/list lacks
// the tool, and its call, which the fast path would have answered, gets
// the JSON-RPC error of a tool that never was; registered again, it is
// listed and called again.
func TestLiveTools_UnregisterNotifies(t *testing.T) {
	s := MustStdio(t, false)
	var tool *pipeline.Tool[handlers.Store]
	for _, x := range handlers.Tools() {
		if x.Name == "create_project" {
			tool = x
		}
	}
	listed := func() string {
		t.Helper()
		s.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
		return s.answer()
	}
	call := func(id, name, args string) rpc {
		t.Helper()
		s.send(`{"jsonrpc":"2.0","id":"` + id + `","method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `}}`)
		return decodeRPC(t, s.answer())
	}
	if !strings.Contains(listed(), `"create_project"`) {
		t.Fatal("create_project not listed at first")
	}
	s.d.Pipeline.Unregister("create_project")
	if n := s.answer(); !strings.Contains(n, `"method":"notifications/tools/list_changed"`) {
		t.Fatalf("after Unregister the session got %s, want notifications/tools/list_changed", n)
	}
	if strings.Contains(listed(), `"create_project"`) {
		t.Fatal("create_project still listed")
	}
	got := call("c1", "create_project", `{"idempotency_key":"key-live-01","name":"live"}`)
	want := call("c2", "no_such_tool", `{}`)
	if got.Error == nil || want.Error == nil || got.Error.Code != want.Error.Code || got.Error.Message != want.Error.Message {
		t.Fatalf("an unregistered tool answers %+v, a tool that never was %+v", got.Error, want.Error)
	}
	if err := s.d.Pipeline.Register(tool); err != nil {
		t.Fatal(err)
	}
	if n := s.answer(); !strings.Contains(n, `"method":"notifications/tools/list_changed"`) {
		t.Fatalf("after Register the session got %s, want notifications/tools/list_changed", n)
	}
	if !strings.Contains(listed(), `"create_project"`) {
		t.Fatal("create_project not listed again")
	}
	if r := call("c3", "create_project", `{"idempotency_key":"key-live-02","name":"live"}`); r.Error != nil || strings.Contains(string(r.Result), `"isError":true`) {
		t.Fatalf("create_project registered again: %+v %s", r.Error, r.Result)
	}
}
