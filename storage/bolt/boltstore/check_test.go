package boltstore_test

import (
	"context"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/bolt/kv"
)

const (
	pA = "01AAAAAAAAAAAAAAAAAAAAAAAA"
	rA = "01CCCCCCCCCCCCCCCCCCCCCCCC"
)

// Ensure Check, bbolt's physical check of the domain's buckets, names a
// record without its project, and accepts a record with it. What the
// store holds against the audit log is handlers.Check's
// (TestCheck_DomainAgainstEvents in package handlers).
func TestCheck_RecordWithoutItsProject(t *testing.T) {
	tests := []struct {
		name     string
		projects []*handlers.Project
		records  []*handlers.Record
		want     string // "" for none
	}{
		{"a record with its project", []*handlers.Project{{ID: pA, Name: "name-A", Revision: 1}}, []*handlers.Record{{ID: rA, ProjectID: pA, Revision: 1}}, ""},
		{"a record without its project", nil, []*handlers.Record{{ID: rA, ProjectID: pA, Revision: 1}},
			"record " + rA + " belongs to project " + pA + ", which does not exist"},
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
			err = db.Bolt().View(func(btx *bolt.Tx) error { return boltstore.Check(kv.Wrap(btx)) })
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check = %v, want no problem", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("Check = %v, want exactly %q", err, tt.want)
			}
		})
	}
}
