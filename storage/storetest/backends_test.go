package storetest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
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

// Ensure the PostgreSQL store reads a database of the previous writerd,
// migrated to schema 1 and its records inserted as that writerd did,
// intact once Open has migrated it.
func TestPostgresUpgrade(t *testing.T) {
	pgtest.URL(t)
	storetest.Upgrade(t, func(t testing.TB, records []*idempotency.Record) storetest.Opener {
		url := pgtest.Empty(t)
		if err := postgres.MigrateTo(context.Background(), url, 1); err != nil {
			t.Fatal(err)
		}
		for _, r := range records {
			pgtest.Exec(t, url, "INSERT INTO idempotency (principal, key, tool, digest, state, result, code, audit_id, created_at, expires_at) "+
				"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
				r.Principal, r.Key, r.Tool, r.Digest, string(r.State), r.Result, r.Code, r.AuditID, r.CreatedAt.UnixNano(), r.ExpiresAt.UnixNano())
		}
		return func() (storetest.Store, error) { return postgres.Open(context.Background(), postgres.Config{URL: url}) }
	})
}

// Ensure the PostgreSQL store's Unsettled reads the partial index
// idempotency_unsettled, not every record: its query's plan, with
// sequential scans priced out as on a table of many records, names it.
func TestPostgresUnsettledByItsIndex(t *testing.T) {
	pgtest.URL(t)
	url := pgtest.Database(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, "EXPLAIN "+postgres.UnsettledQuery)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	rows.Close()
	if all := strings.Join(lines, "\n"); !strings.Contains(all, "idempotency_unsettled") {
		t.Errorf("the plan of Unsettled does not read idempotency_unsettled:\n%s", all)
	}
}

// Ensure the PostgreSQL store deletes the rows of replicas gone for a
// day as another replica says it is seen, and only those: a fleet's
// restarts, each a replica id of its own, do not pile rows up.
func TestPostgresReplicasGone(t *testing.T) {
	pgtest.URL(t)
	url := pgtest.Database(t)
	ctx := context.Background()
	s, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"gone", "quiet", "live"} {
		if err := s.Seen(ctx, pipeline.Replica{ID: id, Host: "h:1"}); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.Exec(t, url, "UPDATE writerd_replicas SET seen_at = seen_at - interval '25 hours' WHERE id = 'gone'")
	pgtest.Exec(t, url, "UPDATE writerd_replicas SET seen_at = seen_at - interval '23 hours' WHERE id = 'quiet'")
	if err := s.Seen(ctx, pipeline.Replica{ID: "live", Host: "h:1"}); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Replicas(ctx, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != "live" || rs[1].ID != "quiet" {
		t.Fatalf("replicas %+v: want live and quiet, the one gone 25 hours deleted", rs)
	}
}
