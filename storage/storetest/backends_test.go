package storetest_test

import (
	"context"
	"os"
	"testing"

	"github.com/writerd/writerd/storage/bolt/boltstore"
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

// Ensure the PostgreSQL store keeps every promise, each test on a fresh
// database.
func TestPostgres(t *testing.T) {
	pgtest.URL(t) // skips, or fails if required, without a server
	storetest.Run(t, func(t testing.TB) storetest.Opener {
		url := pgtest.Database(t)
		return func() (storetest.Store, error) { return postgres.Open(context.Background(), postgres.Config{URL: url}) }
	})
}
