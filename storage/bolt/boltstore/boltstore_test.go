package boltstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/bolt/kv"
)

func MustOpen(t testing.TB) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(t.TempDir(), boltstore.Init)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Ensure the store itself keeps names unique and its name index in step
// with renames and deletions, whatever its caller checked.
func TestPutProject_NameIndex(t *testing.T) {
	db := MustOpen(t)
	a := &handlers.Project{ID: "01AAAAAAAAAAAAAAAAAAAAAAAA", Name: "n", Revision: 1}
	b := &handlers.Project{ID: "01BBBBBBBBBBBBBBBBBBBBBBBB", Name: "n", Revision: 1}
	err := db.Update(context.Background(), func(tx *kv.Tx) error {
		s := boltstore.Bind(tx)
		if err := s.PutProject(a); err != nil {
			return err
		}
		if code := pipeline.ErrorCode(s.PutProject(b)); code != pipeline.AlreadyExists {
			t.Errorf("second project with the name: %q, want ALREADY_EXISTS", code)
		}
		a.Name = "m"
		if err := s.PutProject(a); err != nil {
			return err
		}
		if err := s.PutProject(b); err != nil {
			return err
		}
		if err := s.DeleteProject(a.ID); err != nil {
			return err
		}
		for name, want := range map[string]*handlers.Project{"n": b, "m": nil} {
			got, err := s.ProjectByName(name)
			if err != nil {
				return err
			}
			if (got == nil) != (want == nil) || got != nil && got.ID != want.ID {
				t.Errorf("ProjectByName(%q) = %+v, want %+v", name, got, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure the name index keys on the comparison form of a name: look-alikes
// (another normal form, another case) are one name, whichever was stored,
// a project may change the case of its own name, and a rename or deletion
// frees the key.
func TestPutProject_NameIndexComparesNames(t *testing.T) {
	db := MustOpen(t)
	a := &handlers.Project{ID: "01AAAAAAAAAAAAAAAAAAAAAAAA", Name: "Caf\u00e9", Revision: 1}
	b := &handlers.Project{ID: "01BBBBBBBBBBBBBBBBBBBBBBBB", Revision: 1}
	err := db.Update(context.Background(), func(tx *kv.Tx) error {
		s := boltstore.Bind(tx)
		if err := s.PutProject(a); err != nil {
			return err
		}
		for _, name := range []string{"Caf\u00e9", "caf\u00e9", "CAF\u00c9", "Cafe\u0301"} {
			b.Name = name
			if code := pipeline.ErrorCode(s.PutProject(b)); code != pipeline.AlreadyExists {
				t.Errorf("a second project named %+q: %q, want ALREADY_EXISTS", name, code)
			}
			if got, err := s.ProjectByName(name); err != nil || got == nil || got.ID != a.ID {
				t.Errorf("ProjectByName(%+q) = %+v, %v; want the first project", name, got, err)
			}
		}
		a.Name = "CAF\u00c9"
		if err := s.PutProject(a); err != nil {
			return fmt.Errorf("change of case: %w", err)
		}
		a.Name = "other"
		if err := s.PutProject(a); err != nil {
			return err
		}
		b.Name = "caf\u00e9" // freed by the rename
		if err := s.PutProject(b); err != nil {
			return err
		}
		if err := s.DeleteProject(b.ID); err != nil {
			return err
		}
		if got, err := s.ProjectByName("Caf\u00e9"); err != nil || got != nil {
			t.Errorf("ProjectByName after the deletion = %+v, %v; want none", got, err)
		}
		// Exactly one index entry per project: a rename or deletion leaves
		// none behind.
		n := 0
		err := tx.Bucket([]byte("project_names")).ForEach(func(_, _ []byte) error { n++; return nil })
		if err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("name index entries = %d, want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure a name that NameKey cannot compare is refused as a fault, not
// stored: only names the strict parse normalised reach the store.
func TestPutProject_UncomparableName(t *testing.T) {
	db := MustOpen(t)
	err := db.Update(context.Background(), func(tx *kv.Tx) error {
		s := boltstore.Bind(tx)
		return s.PutProject(&handlers.Project{ID: "01AAAAAAAAAAAAAAAAAAAAAAAA", Name: "a\u202eb", Revision: 1})
	})
	if code := pipeline.ErrorCode(err); code != pipeline.Internal {
		t.Fatalf("PutProject with an unnormalised name: %q, want INTERNAL", code)
	}
}

// Ensure a project's records are its own key range: probed and listed
// without touching the neighbouring projects' records.
func TestRecords_KeyRange(t *testing.T) {
	db := MustOpen(t)
	projects := []string{"01AAAAAAAAAAAAAAAAAAAAAAAA", "01AAAAAAAAAAAAAAAAAAAAAAAB", "01AAAAAAAAAAAAAAAAAAAAAAAC"}
	err := db.Update(context.Background(), func(tx *kv.Tx) error {
		s := boltstore.Bind(tx)
		for i, p := range projects {
			if err := s.PutProject(&handlers.Project{ID: p, Name: p, Revision: 1}); err != nil {
				return err
			}
			for j := range i * 2 {
				r := &handlers.Record{ID: "01R" + string(rune('A'+j)) + "AAAAAAAAAAAAAAAAAAAAAA", ProjectID: p, Revision: 1}
				if err := s.PutRecord(r); err != nil {
					return err
				}
			}
		}
		for i, p := range projects {
			has, err := s.HasRecords(p)
			if err != nil {
				return err
			}
			page, more, err := s.Records(p, "", 10)
			if err != nil {
				return err
			}
			if has != (i > 0) || len(page) != i*2 || more {
				t.Errorf("project %d: has records %v, page %d (more %v), want %d", i, has, len(page), more, i*2)
			}
		}
		if code := pipeline.ErrorCode(s.DeleteProject(projects[1])); code != pipeline.ProjectNotEmpty {
			t.Errorf("deleting a project with records: %q, want PROJECT_NOT_EMPTY", code)
		}
		return s.DeleteProject(projects[0])
	})
	if err != nil {
		t.Fatal(err)
	}
}
