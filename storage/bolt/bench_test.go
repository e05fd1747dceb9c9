package bolt_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/boltkeys"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// benchWrites is the size of the database the start-up benchmarks open:
// as many create_project writes, each a project, its name, an audit event
// and an idempotency record, as the pipeline commits them.
const benchWrites = 100_000

// mustBenchDB writes benchWrites writes into a new database, in batches
// (the pipeline commits one per transaction; the file's shape is the
// same), and returns its data directory, closed.
func mustBenchDB(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	db, err := bolt.Open(dir, boltstore.Init)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for batch := 0; batch < benchWrites; batch += 1000 {
		err := db.Update(context.Background(), func(tx *kv.Tx) error {
			for i := batch; i < batch+1000; i++ {
				op := &pipeline.Op[handlers.Store]{Now: now}
				p := &handlers.Project{ID: op.NewID(), Name: fmt.Sprintf("project-%06d", i), Description: strings.Repeat("d", 200),
					Labels: []string{"a", "b"}, Revision: 1, CreatedAt: now, UpdatedAt: now}
				if err := boltstore.Bind(tx).PutProject(p); err != nil {
					return err
				}
				key := fmt.Sprintf("key-%08d", i)
				ev := &auditlog.Event{Time: now, RequestID: op.NewID(), Principal: "local", Transport: "stdio", Tool: "create_project",
					IdempotencyKey: key, Digest: strings.Repeat("ab", 32), Outcome: auditlog.OK,
					Targets: []auditlog.Target{{Kind: "project", ID: p.ID, Revision: 1}}, DurationMS: 1.5}
				if err := boltlog.Bind(tx).Append(ev); err != nil {
					return err
				}
				r := &idempotency.Record{Principal: "local", Key: key, Tool: "create_project", Digest: ev.Digest, State: idempotency.Completed,
					Result: []byte(`{"project":{}}`), AuditID: ev.ID, CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
				if err := (boltkeys.Store{}).Put(tx, r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	return dir
}

// Measure what start-up pays for the file check (meta pages, then every
// page of the tree read with ReadAt) and what a full bbolt Tx.Check would
// add, on a database of 100k writes:
//
//	go test -run '^$' -bench 'Startup' -benchtime 5x ./storage/bolt
func BenchmarkStartup(b *testing.B) {
	dir := mustBenchDB(b)
	fi, err := os.Stat(filepath.Join(dir, bolt.FileName))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d writes: %d MiB", benchWrites, fi.Size()>>20)
	b.Run("Open", func(b *testing.B) { // the file check, then bbolt's open
		for b.Loop() {
			db, err := bolt.Open(dir, boltstore.Init)
			if err != nil {
				b.Fatal(err)
			}
			db.Close()
		}
	})
	b.Run("OpenUnchecked", func(b *testing.B) { // bbolt's open alone
		for b.Loop() {
			db, err := bbolt.Open(filepath.Join(dir, bolt.FileName), 0o600, nil)
			if err != nil {
				b.Fatal(err)
			}
			db.Close()
		}
	})
	b.Run("TxCheck", func(b *testing.B) { // bbolt's full consistency check
		db, err := bbolt.Open(filepath.Join(dir, bolt.FileName), 0o600, &bbolt.Options{ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		for b.Loop() {
			db.View(func(tx *bbolt.Tx) error {
				for err := range tx.Check() {
					b.Fatal(err)
				}
				return nil
			})
		}
	})
	b.Run("Check", func(b *testing.B) { // bolt.Check: Tx.Check and the pipeline's invariants
		db, err := bbolt.Open(filepath.Join(dir, bolt.FileName), 0o600, &bbolt.Options{ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		for b.Loop() {
			if err := db.View(bolt.Check); err != nil {
				b.Fatal(err)
			}
		}
	})
}
