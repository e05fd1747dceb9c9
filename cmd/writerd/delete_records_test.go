package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/writerd/writerd/auditlog"
)

// Ensure delete_records through the built binary over MCP: the unconfirmed
// call answers CONFIRMATION_REQUIRED with the preview member beside code
// and nothing else added; the confirmed call with the same key deletes the
// unlocked records and groups the locked ones; its retry replays the answer
// byte for byte; the database then holds the locked records alone, one ok
// event names the deleted ones, and writerd check's invariants hold
// (checked when the test ends).
func TestDeleteRecords_ThroughTheBinary(t *testing.T) {
	d := MustStart(t)
	project := mustSucceed(t, d.Call("create_project", `{"idempotency_key":"k-project","name":"alpha"}`))["project"].(map[string]any)["id"].(string)
	var ids, locked []string
	for i := range 12 {
		r := mustSucceed(t, d.Call("create_record", fmt.Sprintf(`{"idempotency_key":"k-record-%02d","project_id":%q,"title":"r%02d"}`, i, project, i)))
		id := r["record"].(map[string]any)["id"].(string)
		ids = append(ids, id)
		if i%4 == 1 {
			mustSucceed(t, d.Call("update_record", fmt.Sprintf(`{"idempotency_key":"k-lock-%02d","project_id":%q,"record_id":%q,"expected_revision":1,"locked":true}`, i, project, id)))
			locked = append(locked, id)
		}
	}
	slices.Sort(ids)
	slices.Sort(locked)

	preview := d.Call("delete_records", fmt.Sprintf(`{"idempotency_key":"k-delete-all","project_id":%q,"filter":{}}`, project))
	mustFail(t, preview, "CONFIRMATION_REQUIRED")
	var wire struct {
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal([]byte(text(t, preview)), &wire); err != nil {
		t.Fatal(err)
	}
	var members []string
	for k := range wire.Error {
		members = append(members, k)
	}
	slices.Sort(members)
	if want := []string{"code", "message", "preview", "request_id", "retry", "status"}; !slices.Equal(members, want) {
		t.Fatalf("envelope members = %v, want %v", members, want)
	}
	wantPreview := fmt.Sprintf(`{"matched":12,"would_attempt":12,"would_refuse":[{"code":"RECORD_LOCKED","count":3}],"more_than_cap":false,"sample":%s}`, mustJSONOf(t, ids[:10]))
	if got := string(wire.Error["preview"]); got != wantPreview {
		t.Fatalf("preview = %s\nwant      %s", got, wantPreview)
	}

	confirmed := fmt.Sprintf(`{"idempotency_key":"k-delete-all","project_id":%q,"filter":{},"confirm":true}`, project)
	first := d.Call("delete_records", confirmed)
	got := mustSucceed(t, first)
	deleted := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(locked, id) })
	want := fmt.Sprintf(`{"attempted":12,"deleted":9,"deleted_ids":%s,"refused":[{"code":"RECORD_LOCKED","count":3,"ids":%s}],"not_found":[],"remaining":3}`,
		mustJSONOf(t, deleted), mustJSONOf(t, locked))
	if text(t, first) != want {
		t.Fatalf("answer = %s\nwant     %s (%v)", text(t, first), want, got)
	}
	again := d.Call("delete_records", confirmed)
	mustSucceed(t, again)
	if again.Meta["writerd/replayed"] != true {
		t.Fatalf("retry _meta = %v, want a replay", again.Meta)
	}
	raw := d.rawResults()
	if n := len(raw); string(raw[n-1]) != string(raw[n-2]) {
		t.Fatalf("structuredContent not byte-identical:\n%s\n%s", raw[n-2], raw[n-1])
	}

	d.Stop()
	s := MustOpenStore(t, d.store)
	if n := s.records(); n != 3 {
		t.Fatalf("records = %d, want the 3 locked ones", n)
	}
	evs := s.eventsFor("k-delete-all")
	if len(evs) != 1 || evs[0].Outcome != auditlog.OK || len(evs[0].Targets) != 9 {
		t.Fatalf("audit events for the key = %+v, want one ok event naming 9 records", evs)
	}
	for i, tg := range evs[0].Targets {
		if tg.Kind != "record" || tg.ID != deleted[i] || tg.Revision != 1 {
			t.Fatalf("target %d = %+v, want record %s at revision 1", i, tg, deleted[i])
		}
	}
}

// Ensure the selection's rules hold over MCP as in Go: both forms, or 201
// ids, are refused before anything runs.
func TestDeleteRecords_SelectionRefusedOverMCP(t *testing.T) {
	d := MustStart(t)
	project := mustSucceed(t, d.Call("create_project", `{"idempotency_key":"k-project","name":"alpha"}`))["project"].(map[string]any)["id"].(string)
	many := make([]string, 201)
	for i := range many {
		many[i] = fmt.Sprintf("7%025d", i)
	}
	for _, c := range []struct{ args, code, message string }{
		{fmt.Sprintf(`{"idempotency_key":"k-both-000","project_id":%q,"record_ids":[%q],"filter":{},"confirm":true}`, project, many[0]),
			"INVALID_INPUT", "(oneOf)"},
		{fmt.Sprintf(`{"idempotency_key":"k-many-000","project_id":%q,"record_ids":%s,"confirm":true}`, project, mustJSONOf(t, many)),
			"INPUT_TOO_LARGE", "at most 200 items (maxItems)"},
	} {
		e := mustFail(t, d.Call("delete_records", c.args), c.code)
		if !strings.Contains(e.Error.Message, c.message) {
			t.Fatalf("message = %q, want it to name %s", e.Error.Message, c.message)
		}
	}
	d.Stop()
	if n := len(MustOpenStore(t, d.store).events()); n != 1 {
		t.Fatalf("audit events = %d, want only the project's", n)
	}
}

func mustJSONOf(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
