package kv_test

import (
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/storage/bolt/kv"
)

// Ensure RollbackTo undoes exactly the writes since its savepoint, newest
// first: puts over values and over nothing, deletes, sequence numbers; and
// keeps the writes before it.
func TestTx_RollbackTo(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(btx *bolt.Tx) error {
		if _, err := btx.CreateBucket([]byte("b")); err != nil {
			return err
		}
		tx := kv.Wrap(btx)
		b := tx.Bucket([]byte("b"))
		b.Put([]byte("kept"), []byte("1"))
		b.Put([]byte("changed"), []byte("old"))
		b.Put([]byte("deleted"), []byte("here"))
		seq, _ := b.NextSequence()

		sp := tx.Savepoint()
		b.Put([]byte("changed"), []byte("new"))
		b.Put([]byte("changed"), []byte("newer"))
		b.Put([]byte("added"), []byte("x"))
		b.Delete([]byte("deleted"))
		b.NextSequence()
		b.NextSequence()
		if err := tx.RollbackTo(sp); err != nil {
			return err
		}
		for k, want := range map[string]string{"kept": "1", "changed": "old", "deleted": "here", "added": ""} {
			if got := string(b.Get([]byte(k))); got != want {
				t.Errorf("%s = %q after the rollback, want %q", k, got, want)
			}
		}
		if b.Sequence() != seq {
			t.Errorf("sequence %d after the rollback, want %d", b.Sequence(), seq)
		}
		// A second savepoint after a rollback works on its own writes.
		sp = tx.Savepoint()
		b.Put([]byte("later"), []byte("y"))
		if err := tx.RollbackTo(sp); err != nil {
			return err
		}
		if b.Get([]byte("later")) != nil {
			t.Error("a write after the second savepoint survived its rollback")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
