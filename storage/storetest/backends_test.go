package storetest_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/bolt/bolttest"
	"github.com/writerd/writerd/storage/postgres"
	"github.com/writerd/writerd/storage/postgres/pgtest"
	"github.com/writerd/writerd/storage/storetest"
)

// The backends the suite runs on, each by the constructor of its stores.

func TestMain(m *testing.M) {
	pgtest.Migrate(postgres.Migrate)
	os.Exit(pgtest.Main(m))
}

// Ensure the embedded bbolt store keeps every promise.
func TestBolt(t *testing.T) { storetest.Run(t, storetest.InDir(boltstore.Open)) }

// Ensure the embedded bbolt store reads a file of the previous writerd,
// its records in format 1 and no unsettled index, intact.
func TestBoltUpgrade(t *testing.T) {
	storetest.Upgrade(t, func(t testing.TB, records []*idempotency.Record) storetest.Opener {
		dir := filepath.Join(t.TempDir(), "data")
		s, err := boltstore.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		bolttest.Update(t, dir, func(tx bolttest.Tx) error {
			for _, r := range records {
				if err := bolttest.PutFormat1(tx, r); err != nil {
					return err
				}
			}
			return bolttest.DropUnsettledIndex(tx)
		})
		return func() (storetest.Store, error) { return boltstore.Open(dir) }
	})
}

// Ensure the PostgreSQL store keeps every promise, each test on a fresh
// database.
func TestPostgres(t *testing.T) {
	pgtest.URL(t) // skips, or fails if required, without a server
	storetest.Run(t, func(t testing.TB) storetest.Opener {
		url := pgtest.Database(t)
		return func() (storetest.Store, error) { return postgres.Open(context.Background(), postgres.Config{URL: url}) }
	})
}
