package main

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// Ensure a kill -9 while 8 clients write loses no acknowledged write: after
// a restart, each acknowledged project is there with its audit event and
// idempotency record, no audit event lacks its write and no write lacks its
// audit event, and a retry of an acknowledged call replays it. On
// PostgreSQL, the server crashes too (stop -m immediate, fsync on, on a
// cluster of the test's own) and recovers before the store is read.
func TestCrash_KillWhileWriting(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the daemon")
	}
	eachStore(t, testCrashKillWhileWriting)
}

func testCrashKillWhileWriting(t *testing.T, kind storeKind) {
	const clients = 8
	// On PostgreSQL, a database on a cluster of the test's own, which it
	// crashes; kind.make would clone one on the shared server, unused.
	var ts testStore
	var cluster *pgtest.Cluster
	if kind.name == pgStores.name {
		cluster = pgtest.StartCluster(t, pgtest.Options{Fsync: true})
		ts = testStore{Dir: t.TempDir(), URL: pgtest.EmptyOn(t, cluster.URL("postgres"))}
	} else {
		ts = kind.make(t)
	}
	d := mustStartWith(t, daemonConfig{store: ts})

	type ack struct{ key, id, auditID string }
	var (
		mu    sync.Mutex
		acked []ack
		wg    sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("client%d-%06d", c, i)
				res, err := d.call("create_project", `{"idempotency_key":"`+key+`","name":"`+key+`"}`)
				if err != nil {
					return // the daemon is gone
				}
				if res.IsError {
					t.Errorf("%s: %s", key, text(t, res))
					return
				}
				id := res.StructuredContent.(map[string]any)["project"].(map[string]any)["id"].(string)
				mu.Lock()
				acked = append(acked, ack{key, id, res.Meta["writerd/audit_id"].(string)})
				mu.Unlock()
			}
		})
	}
	// Kill while every client is busy, once enough writes are acknowledged.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d writes acknowledged in 30s", n)
		}
	}
	d.Kill()
	if cluster != nil {
		if err := cluster.Crash(); err != nil {
			t.Fatal(err)
		}
		if err := cluster.Start(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()

	s := MustOpenStore(t, d.store)
	okEvents := map[string]*auditlog.Event{}
	for _, e := range s.events() {
		if e.Outcome != auditlog.OK {
			t.Fatalf("unexpected failed event %+v", e)
		}
		okEvents[e.ID] = e
	}
	s.view(func(tx pipeline.Tx[handlers.Store]) error {
		for _, a := range acked {
			if _, err := tx.Domain().Project(a.id); err != nil {
				t.Errorf("acknowledged project %s of %s is gone: %v", a.id, a.key, err)
			}
			if e := okEvents[a.auditID]; e == nil || e.IdempotencyKey != a.key || e.Targets[0].ID != a.id {
				t.Errorf("acknowledged write %s has no audit event", a.key)
			}
		}
		// Every event's write is there, and every write has its event.
		for _, e := range okEvents {
			if _, err := tx.Domain().Project(e.Targets[0].ID); err != nil {
				t.Errorf("audit event %d names project %s, which does not exist", e.Seq, e.Targets[0].ID)
			}
		}
		return nil
	})
	if n := s.projects(); n != len(okEvents) {
		t.Errorf("%d projects but %d audit events", n, len(okEvents))
	}
	for _, a := range acked {
		if r := s.record("local", a.key); r == nil || r.AuditID != a.auditID {
			t.Errorf("acknowledged write %s has no idempotency record", a.key)
		}
	}
	t.Logf("%d writes acknowledged before the kill, %d committed", len(acked), len(okEvents))
	s.s.Close()

	// The restarted daemon replays an acknowledged write.
	again := mustStartWith(t, daemonConfig{store: d.store})
	first := acked[0]
	res := again.Call("create_project", `{"idempotency_key":"`+first.key+`","name":"`+first.key+`"}`)
	p := mustSucceed(t, res)["project"].(map[string]any)
	if res.Meta["writerd/replayed"] != true || p["id"] != first.id {
		t.Fatalf("retry after restart: replayed %v, id %v, want %s", res.Meta["writerd/replayed"], p["id"], first.id)
	}
}
