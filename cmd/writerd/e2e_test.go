package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tools of docs/DESIGN.md section 6 that this build serves.
var (
	writeTools = []string{"create_project", "create_record", "delete_project", "delete_record", "delete_records", "update_project", "update_record"}
	readTools  = []string{"get_project", "get_record", "get_write_outcome", "list_projects", "list_records"}
)

const marker = "zzMARKERzz"

// Ensure tools/list advertises exactly the built-in tools, with closed input
// schemas, a required idempotency_key on write tools, truthful annotations,
// and the schemas of the golden files in testdata/tools.
func TestToolsList(t *testing.T) {
	d := MustStart(t)
	res, err := d.session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		in := tool.InputSchema.(map[string]any)
		if in["type"] != "object" || in["additionalProperties"] != false {
			t.Errorf("%s: input schema is not a closed object", tool.Name)
		}
		required, _ := in["required"].([]any)
		hasKey := slices.Contains(required, any("idempotency_key"))
		write := slices.Contains(writeTools, tool.Name)
		if hasKey != write {
			t.Errorf("%s: write tool %v, requires idempotency_key %v", tool.Name, write, hasKey)
		}
		a := tool.Annotations
		if a.ReadOnlyHint == write || (write && a.DestructiveHint == nil) {
			t.Errorf("%s: annotations %+v do not match the tool's kind", tool.Name, a)
		}
		// Deletes and updates destroy or overwrite; only creates add.
		if write && *a.DestructiveHint != !strings.HasPrefix(tool.Name, "create_") {
			t.Errorf("%s: destructiveHint %v", tool.Name, *a.DestructiveHint)
		}
		for which, schema := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			mustSayWhatIsEnforced(t, tool.Name+" "+which, "", schema.(map[string]any))
		}
		mustMatchGolden(t, filepath.Join("testdata", "tools", tool.Name+".json"), tool)
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(writeTools), readTools...)))
	if !slices.Equal(slices.Sorted(slices.Values(names)), want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}
}

// mustSayWhatIsEnforced walks a schema: every property has a description,
// and every integer has the bounds the strict parse enforces at most.
func mustSayWhatIsEnforced(t *testing.T, tool, at string, s map[string]any) {
	t.Helper()
	if s["type"] == "integer" {
		min, _ := s["minimum"].(float64)
		max, _ := s["maximum"].(float64)
		if s["minimum"] == nil || s["maximum"] == nil || min < -(1<<53-1) || max > 1<<53-1 {
			t.Errorf("%s%s: integer bounds [%v, %v], want within ±(2^53−1)", tool, at, s["minimum"], s["maximum"])
		}
	}
	props, _ := s["properties"].(map[string]any)
	for name, sub := range props {
		sm, _ := sub.(map[string]any)
		if d, _ := sm["description"].(string); d == "" {
			t.Errorf("%s%s/%s: no description", tool, at, name)
		}
		mustSayWhatIsEnforced(t, tool, at+"/"+name, sm)
	}
	for _, kw := range []string{"items", "additionalProperties"} {
		if sm, ok := s[kw].(map[string]any); ok {
			mustSayWhatIsEnforced(t, tool, at+"/"+kw, sm)
		}
	}
}

func mustMatchGolden(t *testing.T, path string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/writerd -run %s -update)", err, t.Name())
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the daemon's answer; if the change is intended, run with -update\ngot:\n%s", path, got)
	}
}

// Ensure an identical retry replays the first answer byte for byte, marked
// as a replay, and creates one project, not two.
func TestCreateProject_ReplaySameKey(t *testing.T) {
	d := MustStart(t)
	first := d.Call("create_project", `{"idempotency_key":"k-00000001","name":"alpha"}`)
	p := mustSucceed(t, first)["project"].(map[string]any)
	again := d.Call("create_project", `{ "name" : "alpha", "idempotency_key" : "k-00000001" }`)
	mustSucceed(t, again)
	if again.Meta["writerd/replayed"] != true || first.Meta["writerd/replayed"] != nil {
		t.Fatalf("_meta first %v, again %v", first.Meta, again.Meta)
	}
	if again.Meta["writerd/audit_id"] != first.Meta["writerd/audit_id"] || first.Meta["writerd/audit_id"] == nil {
		t.Fatalf("audit ids differ: %v vs %v", first.Meta, again.Meta)
	}
	raw := d.rawResults()
	if len(raw) != 2 || string(raw[0]) != string(raw[1]) {
		t.Fatalf("structuredContent not byte-identical:\n%s", raw)
	}
	if text(t, first) != text(t, again) {
		t.Fatal("text blocks differ")
	}
	d.Stop()
	s := MustOpenStore(t, d.store)
	if n := s.projects(); n != 1 {
		t.Fatalf("projects = %d, want 1", n)
	}
	if evs := s.eventsFor("k-00000001"); len(evs) != 1 || evs[0].Targets[0].ID != p["id"] {
		t.Fatalf("audit events for the key: %+v", evs)
	}
}

// Ensure the same key with changed arguments answers IDEMPOTENCY_KEY_REUSED
// and changes nothing.
func TestCreateProject_ChangedRetry(t *testing.T) {
	d := MustStart(t)
	mustSucceed(t, d.Call("create_project", `{"idempotency_key":"k-00000001","name":"alpha"}`))
	e := mustFail(t, d.Call("create_project", `{"idempotency_key":"k-00000001","name":"beta"}`), "IDEMPOTENCY_KEY_REUSED")
	if e.Error.Status != 422 || e.Error.Retry != "new_key" {
		t.Fatalf("envelope %+v", e.Error)
	}
	list := mustSucceed(t, d.Call("list_projects", `{}`))["projects"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["name"] != "alpha" {
		t.Fatalf("projects after the reused key: %v", list)
	}
	d.Stop()
	if n := len(MustOpenStore(t, d.store).events()); n != 1 {
		t.Fatalf("audit events = %d, want 1", n)
	}
}

// Ensure a write the handler refuses records exactly one audit event with
// its code and the request digest, and that identical and changed retries
// under its key both conflict without another event.
func TestUpdateProject_RefusalAuditedOnce(t *testing.T) {
	d := MustStart(t)
	p := mustSucceed(t, d.Call("create_project", `{"idempotency_key":"k-00000001","name":"alpha"}`))["project"].(map[string]any)
	id := p["id"].(string)
	update := `{"idempotency_key":"k-00000002","project_id":"` + id + `","expected_revision":7,"name":"` + marker + `"}`
	e := mustFail(t, d.Call("update_project", update), "REVISION_CONFLICT")
	if e.Error.Status != 409 || e.Error.Retry != "new_key" || strings.Contains(e.Error.Message, marker) {
		t.Fatalf("envelope %+v", e.Error)
	}
	e = mustFail(t, d.Call("update_project", update), "IDEMPOTENCY_KEY_FAILED")
	if !strings.Contains(e.Error.Message, "REVISION_CONFLICT") {
		t.Fatalf("KEY_FAILED does not name the original code: %s", e.Error.Message)
	}
	mustFail(t, d.Call("update_project", `{"idempotency_key":"k-00000002","project_id":"`+id+`","expected_revision":1,"name":"beta"}`), "IDEMPOTENCY_KEY_REUSED")
	got := mustSucceed(t, d.Call("get_project", `{"project_id":"`+id+`"}`))["project"].(map[string]any)
	if got["name"] != "alpha" || got["revision"] != 1.0 {
		t.Fatalf("the refused update changed the project: %v", got)
	}
	d.Stop()
	s := MustOpenStore(t, d.store)
	evs := s.eventsFor("k-00000002")
	if len(evs) != 1 {
		t.Fatalf("audit events for the key = %d, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Outcome != "failed" || ev.Code != "REVISION_CONFLICT" || ev.Status != 409 || len(ev.Digest) != 64 {
		t.Fatalf("event %+v", ev)
	}
	if r := s.record("local", "k-00000002"); r == nil || r.Digest != ev.Digest || r.Code != "REVISION_CONFLICT" {
		t.Fatalf("idempotency record %+v", r)
	}
}

// Ensure each class of bad input is rejected with its code, echoes nothing
// the caller sent, and creates no project, record, key or audit event.
// (Duplicate members, invalid UTF-8 and lone surrogates never reach the
// pipeline over MCP: the frame gate refuses the frame; see frames_test.go.)
func TestRejections(t *testing.T) {
	big := `{"idempotency_key":"k-00000001","name":"a","description":"` + strings.Repeat(marker, 14000) + `"}`
	deep := `{"idempotency_key":"k-00000001","name":"a","labels":` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `,"x":"` + marker + `"}`
	tests := []struct {
		name, args, code string
	}{
		{"unknown member", `{"idempotency_key":"k-00000001","name":"a","` + marker + `":"` + marker + `"}`, "INVALID_INPUT"},
		{"wrong case", `{"idempotency_key":"k-00000001","Name":"` + marker + `"}`, "INVALID_INPUT"},
		{"integer 2^53", `{"idempotency_key":"k-00000001","name":"` + marker + `","project_id":"01J00000000000000000000000","expected_revision":9007199254740992}`, "INVALID_INPUT"},
		{"deep nesting", deep, "INPUT_TOO_LARGE"},
		{"oversize", big, "INPUT_TOO_LARGE"},
		{"oversize, 4 MiB", `{"idempotency_key":"k-00000001","name":"a","description":"` + strings.Repeat(marker, 400<<10) + `"}`, "INPUT_TOO_LARGE"},
		{"wrong type", `{"idempotency_key":"k-00000001","name":"a","labels":"` + marker + `"}`, "INVALID_INPUT"},
		{"null", `{"idempotency_key":"k-00000001","name":"` + marker + `","description":null}`, "INVALID_INPUT"},
		{"name too long", `{"idempotency_key":"k-00000001","name":"` + strings.Repeat(marker, 11) + `"}`, "INPUT_TOO_LARGE"},
	}
	d := MustStart(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := "create_project"
			if strings.Contains(tt.args, "expected_revision") {
				tool = "update_project"
			}
			res := d.Call(tool, tt.args)
			e := mustFail(t, res, tt.code)
			if strings.Contains(text(t, res), marker) {
				t.Fatalf("the answer echoes the input: %s", text(t, res))
			}
			if e.Error.Retry != "new_key" || !strings.HasSuffix(e.Error.Message, ".") {
				t.Fatalf("envelope %+v", e.Error)
			}
		})
	}
	d.Stop()
	if strings.Contains(d.stderr.String(), marker) {
		t.Fatal("the log holds an argument value")
	}
	s := MustOpenStore(t, d.store)
	if p, r, e, k := s.projects(), s.records(), len(s.events()), s.keys(); p+r+e+k != 0 {
		t.Fatalf("rejected calls left projects %d records %d events %d keys %d", p, r, e, k)
	}
}

// Ensure a handler that panics and one that fails with an unexpected error
// answer the fixed INTERNAL error without their secrets, are audited with
// code INTERNAL, and the daemon serves the next call.
func TestInternalErrors(t *testing.T) {
	d := mustStartWith(t, daemonConfig{bin: testBinary})
	for i, tool := range []string{"test_panic", "test_error"} {
		res := d.Call(tool, fmt.Sprintf(`{"idempotency_key":"k-0000000%d","marker":"%s"}`, i, marker))
		e := mustFail(t, res, "INTERNAL")
		if e.Error.Message != "Internal error." || e.Error.Status != 500 || e.Error.Retry != "new_key" {
			t.Fatalf("%s: envelope %+v", tool, e.Error)
		}
		if body := text(t, res); strings.Contains(body, "secret") || strings.Contains(body, marker) || strings.Contains(body, "panic") {
			t.Fatalf("%s: the answer leaks: %s", tool, body)
		}
		if res.Meta["writerd/audit_id"] == nil {
			t.Fatalf("%s: no audit id for a recorded failure", tool)
		}
	}
	mustSucceed(t, d.Call("create_project", `{"idempotency_key":"k-00000003","name":"after"}`))
	d.Stop()
	if !strings.Contains(d.stderr.String(), "secret-panic-marker") {
		t.Error("the panic's cause is missing from the log")
	}
	s := MustOpenStore(t, d.store)
	for _, key := range []string{"k-00000000", "k-00000001"} {
		if evs := s.eventsFor(key); len(evs) != 1 || evs[0].Code != "INTERNAL" || evs[0].Status != 500 {
			t.Fatalf("events for %s: %+v", key, evs)
		}
	}
}

// Ensure that when even the failure's audit event cannot be saved, the
// client still gets the fixed INTERNAL error, and nothing is left behind.
func TestInternalErrors_FailureAuditLost(t *testing.T) {
	d := mustStartWith(t, daemonConfig{bin: testBinary, env: []string{"WRITERD_TEST_FAULT=failure-audit"}})
	p := mustSucceed(t, d.Call("create_project", `{"idempotency_key":"k-00000001","name":"alpha"}`))["project"].(map[string]any)
	res := d.Call("update_project", `{"idempotency_key":"k-00000002","project_id":"`+p["id"].(string)+`","expected_revision":5}`)
	e := mustFail(t, res, "INTERNAL")
	if e.Error.Message != "Internal error." || e.Error.Retry != "same_key" || strings.Contains(text(t, res), "secret") {
		t.Fatalf("envelope %+v", e.Error)
	}
	if res.Meta["writerd/audit_id"] != nil {
		t.Fatal("an audit id for an event that was not saved")
	}
	d.Stop()
	s := MustOpenStore(t, d.store)
	if evs := s.eventsFor("k-00000002"); len(evs) != 0 || s.record("local", "k-00000002") != nil {
		t.Fatalf("the lost failure left events %+v", evs)
	}
}

// Ensure two concurrent identical calls with one key make one write, one
// audit event and two identical answers.
func TestCreateProject_ConcurrentSameKey(t *testing.T) {
	d := MustStart(t)
	var wg sync.WaitGroup
	results := make([]*sdk.CallToolResult, 2)
	for i := range results {
		wg.Go(func() { results[i] = d.Call("create_project", `{"idempotency_key":"k-00000001","name":"alpha"}`) })
	}
	wg.Wait()
	a, b := mustSucceed(t, results[0]), mustSucceed(t, results[1])
	if fmt.Sprint(a) != fmt.Sprint(b) || text(t, results[0]) != text(t, results[1]) {
		t.Fatalf("answers differ:\n%v\n%v", a, b)
	}
	if (results[0].Meta["writerd/replayed"] == true) == (results[1].Meta["writerd/replayed"] == true) {
		t.Fatal("want exactly one of the two answers to be a replay")
	}
	d.Stop()
	s := MustOpenStore(t, d.store)
	if s.projects() != 1 || len(s.events()) != 1 {
		t.Fatalf("projects %d events %d, want 1 and 1", s.projects(), len(s.events()))
	}
}

// Ensure the log is JSON on stderr, one "call" line per call carrying the
// request id the client saw, and no argument value or data directory.
func TestLogs(t *testing.T) {
	d := MustStart(t)
	ok := d.Call("create_project", `{"idempotency_key":"k-00000001","name":"`+marker+`"}`)
	bad := d.Call("create_project", `{"idempotency_key":"k-00000002","name":"`+marker+`","x":1}`)
	d.Stop()
	calls := map[string]map[string]any{}
	for line := range strings.Lines(d.stderr.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["msg"] == "call" {
			calls[m["request_id"].(string)] = m
		}
	}
	for _, res := range []*sdk.CallToolResult{ok, bad} {
		id := res.Meta["writerd/request_id"].(string)
		if l := calls[id]; l == nil || l["tool"] != "create_project" || l["principal"] != "local" {
			t.Errorf("no call line for request %s: %v", id, l)
		}
	}
	if log := d.stderr.String(); strings.Contains(log, marker) || strings.Contains(log, d.dir) {
		t.Fatal("the log holds an argument value or the data directory")
	}
}

// Ensure --principal names who stdio calls act as: the audit event and the
// idempotency record carry it.
func TestServe_Principal(t *testing.T) {
	d := mustStartWith(t, daemonConfig{args: []string{"--principal", "ci-agent"}})
	mustSucceed(t, d.Call("create_project", `{"idempotency_key":"k-00000001","name":"alpha"}`))
	d.Stop()
	s := MustOpenStore(t, d.store)
	if evs := s.events(); len(evs) != 1 || evs[0].Principal != "ci-agent" || evs[0].Transport != "stdio" {
		t.Fatalf("events %+v", evs)
	}
	if s.record("ci-agent", "k-00000001") == nil || s.record("local", "k-00000001") != nil {
		t.Fatal("the key is not scoped by the principal given")
	}
}
