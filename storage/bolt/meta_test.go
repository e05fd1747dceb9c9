package bolt_test

import (
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/bolt/bolttest"
)

// Ensure a file an earlier writerd wrote, which records no origin (no
// meta bucket), is given the origin its latest checkpoint names: read-only
// it answers with it, and the first read-write open records it, so that
// the daemon finds the log's key by it and a claim of another origin is
// answered with it.
func TestOrigin_OfAnOldFileFromItsCheckpoints(t *testing.T) {
	dir := t.TempDir()
	s, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "k"), "writerd/older", true)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		log := tx.Audit()
		if err := log.Append(&auditlog.Event{Time: time.Now(), Principal: "p", Transport: "go", Tool: "t", Digest: "ab", Outcome: auditlog.OK}); err != nil {
			return err
		}
		root, err := auditlog.TreeHash(log, 1)
		if err != nil {
			return err
		}
		signed, err := auditlog.Checkpoint{Origin: key.Signer.Name(), Size: 1, Root: root}.Sign(key.Signer)
		if err != nil {
			return err
		}
		return log.PutCheckpoint(1, signed)
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// As an earlier writerd left it.
	bolttest.Update(t, dir, func(tx bolttest.Tx) error { return tx.DeleteBucket([]byte("writerd_meta")) })
	bolttest.Update(t, dir, func(tx bolttest.Tx) error {
		if tx.Bucket([]byte("writerd_meta")) != nil {
			t.Fatal("the meta bucket is still there")
		}
		return nil
	})

	ro, err := bolt.OpenStorageReadOnly(dir, boltstore.Domain)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ro.Origin(ctx); err != nil || got != "writerd/older" {
		t.Errorf("read-only, the origin is %q, %v; want the checkpoint's, writerd/older", got, err)
	}
	ro.Close()

	rw, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rw.ClaimOrigin(ctx, "writerd/newer"); err != nil || got != "writerd/older" {
		t.Errorf("a claim of another origin: %q, %v; want writerd/older", got, err)
	}
	rw.Close()
	var recorded string
	db, err := bbolt.Open(bolttest.File(dir), 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket([]byte("writerd_meta")); b != nil {
			recorded = string(b.Get([]byte("origin")))
		}
		return nil
	})
	db.Close()
	if recorded != "writerd/older" {
		t.Errorf("the file records the origin %q, want writerd/older", recorded)
	}
}

// Ensure a store opened read-only claims nothing: the claim fails, and the
// file still records no origin.
func TestClaimOrigin_ReadOnlyFails(t *testing.T) {
	dir := t.TempDir()
	s, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	ro, err := bolt.OpenStorageReadOnly(dir, boltstore.Domain)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.ClaimOrigin(ctx, "writerd/x"); err == nil {
		t.Error("a read-only store recorded an origin")
	}
	if got, err := ro.Origin(ctx); err != nil || got != "" {
		t.Errorf("origin %q, %v; want none", got, err)
	}
}
