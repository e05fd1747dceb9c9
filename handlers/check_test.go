package handlers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/storetest"
)

const (
	pA = "01AAAAAAAAAAAAAAAAAAAAAAAA"
	pB = "01BBBBBBBBBBBBBBBBBBBBBBBB"
	rA = "01CCCCCCCCCCCCCCCCCCCCCCCC"
)

// ok is an ok event of tool at seq naming one target.
func ok(seq uint64, tool, kind, id string, revision int64) *auditlog.Event {
	return &auditlog.Event{Seq: seq, Tool: tool, Outcome: auditlog.OK, Targets: []auditlog.Target{{Kind: kind, ID: id, Revision: revision}}}
}

// Ensure Check names each way the store and the audit log can disagree:
// an entity at a revision no ok event wrote (a failed event does not
// count), an ok event whose write is gone without a later delete, or is
// ahead of the store; and accepts an entity that a later (or the same)
// delete event removed, and other tools' entities. (A record without its
// project is a backend's physical problem: boltstore.Check names it.)
func TestCheck_DomainAgainstEvents(t *testing.T) {
	project := func(id string, rev int64) *handlers.Project {
		return &handlers.Project{ID: id, Name: "name-" + id[2:3], Revision: rev}
	}
	tests := []struct {
		name     string
		projects []*handlers.Project
		records  []*handlers.Record
		events   []*auditlog.Event
		want     string // "" for none
	}{
		{"every write audited", []*handlers.Project{project(pA, 2)}, []*handlers.Record{{ID: rA, ProjectID: pA, Revision: 1}},
			[]*auditlog.Event{ok(1, "create_project", "project", pA, 1), ok(2, "update_project", "project", pA, 2), ok(3, "create_record", "record", rA, 1)}, ""},
		{"a project at a revision no event wrote", []*handlers.Project{project(pA, 3)}, nil,
			[]*auditlog.Event{ok(1, "create_project", "project", pA, 1)},
			"project " + pA + " at revision 3 has no ok audit event"},
		{"only a failed event names the revision", []*handlers.Project{project(pA, 1)}, nil,
			[]*auditlog.Event{{Seq: 1, Tool: "create_project", Outcome: auditlog.Failed, Targets: []auditlog.Target{{Kind: "project", ID: pA, Revision: 1}}}},
			"project " + pA + " at revision 1 has no ok audit event"},
		{"a record no event wrote", []*handlers.Project{project(pA, 1)}, []*handlers.Record{{ID: rA, ProjectID: pA, Revision: 1}},
			[]*auditlog.Event{ok(1, "create_project", "project", pA, 1)},
			"record " + rA + " at revision 1 has no ok audit event"},
		{"a write that is gone", nil, nil,
			[]*auditlog.Event{ok(1, "create_project", "project", pB, 1)},
			"audit event 1 (create_project) wrote project " + pB + " at revision 1, which is gone without a delete event"},
		{"a write deleted later", nil, nil,
			[]*auditlog.Event{ok(1, "create_project", "project", pB, 1), ok(2, "delete_project", "project", pB, 1)}, ""},
		{"a delete before the write", nil, nil,
			[]*auditlog.Event{ok(1, "delete_project", "project", pB, 1), ok(2, "create_project", "project", pB, 1)},
			"audit event 2 (create_project) wrote project " + pB + " at revision 1, which is gone without a delete event"},
		{"a write ahead of the store", []*handlers.Project{project(pA, 1)}, nil,
			[]*auditlog.Event{ok(1, "create_project", "project", pA, 1), ok(2, "update_project", "project", pA, 2)},
			"audit event 2 (update_project) wrote project " + pA + " at revision 2, but the store holds revision 1"},
		{"another tool's entity", nil, nil,
			[]*auditlog.Event{ok(1, "custom_tool", "widget", pA, 1)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := storetest.New(t, backend, storetest.Options{})
			defer e.Close() // the planted store disagrees with its (empty) audit log on purpose
			e.Update(func(tx pipeline.Tx[handlers.Store]) error {
				s := tx.Domain()
				for _, p := range tt.projects {
					if err := s.PutProject(p); err != nil {
						return err
					}
				}
				for _, r := range tt.records {
					if err := s.PutRecord(r); err != nil {
						return err
					}
				}
				return nil
			})
			var err error
			e.View(func(tx pipeline.Tx[handlers.Store]) error {
				err = handlers.Check(tx.Domain(), tt.events)
				return nil
			})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check = %v, want no problem", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("Check = %v, want exactly %q", err, tt.want)
			}
		})
	}
}

// Ensure a store that the tools wrote through the pipeline passes every
// check of writerd check (handlers.CheckStore), Check against its own
// audit log among them: creates, updates, refusals and deletes.
func TestCheck_WrittenByTheTools(t *testing.T) {
	e := storetest.New(t, backend, storetest.Options{})
	call := func(tool, args string) string {
		t.Helper()
		res := e.Call(caller, tool, args)
		if res.Err != nil && res.Err.Code != pipeline.RevisionConflict {
			t.Fatalf("%s: %s %s", tool, res.Err.Code, res.Err.Message)
		}
		return string(res.Output)
	}
	id := func(out, kind string) string {
		i := strings.Index(out, `"`+kind+`":{"id":"`) + len(kind) + 10
		return out[i : i+26]
	}
	a := id(call("create_project", `{"idempotency_key":"key-00000001","name":"alpha"}`), "project")
	b := id(call("create_project", `{"idempotency_key":"key-00000002","name":"beta"}`), "project")
	r := id(call("create_record", `{"idempotency_key":"key-00000003","project_id":"`+a+`","title":"t"}`), "record")
	call("update_record", `{"idempotency_key":"key-00000004","project_id":"`+a+`","record_id":"`+r+`","expected_revision":1,"title":"u"}`)
	call("update_project", `{"idempotency_key":"key-00000005","project_id":"`+a+`","expected_revision":9,"name":"gamma"}`)
	call("delete_record", `{"idempotency_key":"key-00000006","project_id":"`+a+`","record_id":"`+r+`","confirm":true}`)
	call("delete_project", `{"idempotency_key":"key-00000007","project_id":"`+b+`","confirm":true}`)

	_, events, problems, err := handlers.CheckStore(context.Background(), e.Store, e.Now())
	if err != nil {
		t.Fatalf("check of what the tools wrote: %v", err)
	}
	for _, p := range problems {
		t.Errorf("check of what the tools wrote: %v", p)
	}
	if events != 7 {
		t.Fatalf("%d audit events, want 7", events)
	}
}
