package boltstore_test

import (
	"context"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/pipeline/boltdb"
	"github.com/writerd/writerd/pipeline/boltdb/boltstore"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

const (
	pA = "01AAAAAAAAAAAAAAAAAAAAAAAA"
	pB = "01BBBBBBBBBBBBBBBBBBBBBBBB"
	rA = "01CCCCCCCCCCCCCCCCCCCCCCCC"
)

// ok is an ok event of tool at seq naming one target.
func ok(seq uint64, tool, kind, id string, revision int64) boltstore.Event {
	return boltstore.Event{Seq: seq, Tool: tool, OK: true, Targets: []boltstore.Target{{Kind: kind, ID: id, Revision: revision}}}
}

// Ensure Check names each way the store and the audit log can disagree:
// an entity at a revision no ok event wrote (a failed event does not
// count), an ok event whose write is gone without a later delete, or is
// ahead of the store, a record without its project; and accepts an entity
// that a later (or the same) delete event removed, and other tools'
// entities.
func TestCheck_DomainAgainstEvents(t *testing.T) {
	project := func(id string, rev int64) *handlers.Project {
		return &handlers.Project{ID: id, Name: "name-" + id[2:3], Revision: rev}
	}
	tests := []struct {
		name     string
		projects []*handlers.Project
		records  []*handlers.Record
		events   []boltstore.Event
		want     string // "" for none
	}{
		{"every write audited", []*handlers.Project{project(pA, 2)}, []*handlers.Record{{ID: rA, ProjectID: pA, Revision: 1}},
			[]boltstore.Event{ok(1, "create_project", "project", pA, 1), ok(2, "update_project", "project", pA, 2), ok(3, "create_record", "record", rA, 1)}, ""},
		{"a project at a revision no event wrote", []*handlers.Project{project(pA, 3)}, nil,
			[]boltstore.Event{ok(1, "create_project", "project", pA, 1)},
			"project " + pA + " at revision 3 has no ok audit event"},
		{"only a failed event names the revision", []*handlers.Project{project(pA, 1)}, nil,
			[]boltstore.Event{{Seq: 1, Tool: "create_project", OK: false, Targets: []boltstore.Target{{Kind: "project", ID: pA, Revision: 1}}}},
			"project " + pA + " at revision 1 has no ok audit event"},
		{"a record no event wrote", []*handlers.Project{project(pA, 1)}, []*handlers.Record{{ID: rA, ProjectID: pA, Revision: 1}},
			[]boltstore.Event{ok(1, "create_project", "project", pA, 1)},
			"record " + rA + " at revision 1 has no ok audit event"},
		{"a write that is gone", nil, nil,
			[]boltstore.Event{ok(1, "create_project", "project", pB, 1)},
			"audit event 1 (create_project) wrote project " + pB + " at revision 1, which is gone without a delete event"},
		{"a write deleted later", nil, nil,
			[]boltstore.Event{ok(1, "create_project", "project", pB, 1), ok(2, "delete_project", "project", pB, 1)}, ""},
		{"a delete before the write", nil, nil,
			[]boltstore.Event{ok(1, "delete_project", "project", pB, 1), ok(2, "create_project", "project", pB, 1)},
			"audit event 2 (create_project) wrote project " + pB + " at revision 1, which is gone without a delete event"},
		{"a write ahead of the store", []*handlers.Project{project(pA, 1)}, nil,
			[]boltstore.Event{ok(1, "create_project", "project", pA, 1), ok(2, "update_project", "project", pA, 2)},
			"audit event 2 (update_project) wrote project " + pA + " at revision 2, but the store holds revision 1"},
		{"a record without its project", nil, []*handlers.Record{{ID: rA, ProjectID: pA, Revision: 1}},
			[]boltstore.Event{ok(1, "create_record", "record", rA, 1)},
			"record " + rA + " belongs to project " + pA + ", which does not exist"},
		{"another tool's entity", nil, nil,
			[]boltstore.Event{ok(1, "custom_tool", "widget", pA, 1)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := MustOpen(t)
			err := db.Update(context.Background(), func(tx *kv.Tx) error {
				s := boltstore.Bind(tx)
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
			if err != nil {
				t.Fatal(err)
			}
			err = db.Bolt().View(func(tx *bolt.Tx) error { return boltstore.Check(tx, tt.events) })
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check = %v, want no problem", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("Check = %v, want exactly %q", err, tt.want)
			}
		})
	}
}

// Ensure a store that the tools wrote through the pipeline passes Check
// against its own audit log: creates, updates, refusals and deletes.
func TestCheck_WrittenByTheTools(t *testing.T) {
	db := MustOpen(t)
	p := pipeline.New(pipeline.Config[handlers.Store]{Storage: boltdb.NewStorage(db, boltstore.Bind)})
	if err := p.Register(handlers.Tools()...); err != nil {
		t.Fatal(err)
	}
	caller := pipeline.Caller{Principal: "t", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}
	call := func(tool, args string) string {
		t.Helper()
		res := p.Call(context.Background(), caller, tool, []byte(args))
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

	var events []boltstore.Event
	err := db.Bolt().View(func(tx *bolt.Tx) error {
		var err error
		if events, err = boltstore.EventsOf(tx); err != nil {
			return err
		}
		return boltstore.Check(tx, events)
	})
	if err != nil {
		t.Fatalf("Check of what the tools wrote: %v", err)
	}
	if len(events) != 7 {
		t.Fatalf("%d audit events, want 7", len(events))
	}
}
