package storetest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
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

// openPostgres opens a store on a new database, closed as the test ends,
// and returns it and the database's URL.
func openPostgres(t *testing.T) (*postgres.Store, string) {
	t.Helper()
	pgtest.URL(t)
	url := pgtest.Database(t)
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, url
}

// Ensure the PostgreSQL store deletes the rows of replicas gone for a
// day as another replica says it is seen, and only those: a fleet's
// restarts, each a replica id of its own, do not pile rows up.
func TestPostgresReplicasGone(t *testing.T) {
	ctx := context.Background()
	s, url := openPostgres(t)
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

// sequencerEvent is an event for the sequencer's tests.
func sequencerEvent(key string) *auditlog.Event {
	return &auditlog.Event{Time: time.Now(), RequestID: "01JGHJ0QZ5CCCCCCCCCCCCCCCC", Principal: "local", Transport: "go",
		Tool: "create_project", IdempotencyKey: key, Digest: "ab", Outcome: auditlog.OK}
}

// Ensure a write whose commit the audit log's cut refused (its event at
// or below the cut, which another replica moved meanwhile) commits
// nothing, and runs again with a new id above the cut: once in the next
// batch, then alone; the log holds its last run's event alone, numbered 1.
func TestPostgresStaleSealRunsAgain(t *testing.T) {
	ctx := context.Background()
	s, url := openPostgres(t)
	var ids []string
	err := s.Update(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		e := sequencerEvent("key-stale-01")
		if err := tx.Audit().Append(e); err != nil {
			return err
		}
		ids = append(ids, e.ID)
		if len(ids) <= 2 {
			// As a cut moved by another replica, before this commit.
			pgtest.Exec(t, url, "UPDATE audit_cut SET id = $1", e.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Update = %v, want it committed once the cut no longer refuses it", err)
	}
	if len(ids) != 3 || ids[1] <= ids[0] || ids[2] <= ids[1] {
		t.Fatalf("the write ran with ids %v; want three runs, each id above the cut its last run met", ids)
	}
	var evs []*auditlog.Event
	err = s.View(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		return auditlog.All(tx.Audit(), func(e *auditlog.Event) error { evs = append(evs, e); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].ID != ids[2] || evs[0].Seq != 1 {
		t.Fatalf("the log holds %+v, want the last run's event %s alone, numbered 1", evs, ids[2])
	}
	if q := pgtest.Value[int64](t, url, "SELECT count(*) FROM audit_queue"); q != 0 {
		t.Fatalf("%d events still queued", q)
	}
}

// Ensure two replicas' writes, with readers forcing integrations among
// them, make one dense log whose ids and times only grow with the
// sequence, and every committed event is in it once.
func TestPostgresSequencedUnderReaders(t *testing.T) {
	pgtest.URL(t)
	url := pgtest.Database(t)
	ctx := context.Background()
	var stores []*postgres.Store
	for range 2 {
		s, err := postgres.Open(ctx, postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	const writers, each = 8, 40
	var mu sync.Mutex
	committed := map[string]bool{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			s := stores[w%2]
			for i := range each {
				var id string
				err := s.Update(ctx, func(tx pipeline.Tx[handlers.Store]) error {
					e := sequencerEvent(fmt.Sprintf("key-%02d-%04d", w, i))
					err := tx.Audit().Append(e)
					id = e.ID
					return err
				})
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				mu.Lock()
				committed[id] = true
				mu.Unlock()
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				stores[r].View(ctx, func(tx pipeline.Tx[handlers.Store]) error { _, err := tx.Audit().Size(); return err })
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	var evs []*auditlog.Event
	err := stores[0].View(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		return auditlog.All(tx.Audit(), func(e *auditlog.Event) error { evs = append(evs, e); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != writers*each || len(committed) != writers*each {
		t.Fatalf("%d events in the log, %d writes committed; want %d", len(evs), len(committed), writers*each)
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) || !committed[e.ID] {
			t.Fatalf("event %d: seq %d, id %s committed %v", i+1, e.Seq, e.ID, committed[e.ID])
		}
		if i > 0 && (e.ID <= evs[i-1].ID || e.Time.Before(evs[i-1].Time)) {
			t.Fatalf("event %d (%s, %v) does not follow event %d (%s, %v)", i+1, e.ID, e.Time, i, evs[i-1].ID, evs[i-1].Time)
		}
	}
	if q := pgtest.Value[int64](t, url, "SELECT count(*) FROM audit_queue"); q != 0 {
		t.Fatalf("%d events still queued", q)
	}
}
