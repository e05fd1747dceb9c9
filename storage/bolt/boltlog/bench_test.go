package boltlog_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// benchEvent is an event of the size a create_project leaves (~420
// canonical bytes): a ULID target, a 64-hex digest, ids.
func benchEvent(i int) *auditlog.Event {
	e := failedEvent()
	e.Outcome, e.Code, e.Status = auditlog.OK, "", 0
	e.Principal, e.Tool = "claude-code", "create_project"
	e.IdempotencyKey = fmt.Sprintf("bench-%08d", i)
	e.Time = t0.Add(time.Duration(i) * time.Millisecond)
	e.Targets = []auditlog.Target{{Kind: "project", ID: "01JGHJ0QZ5BBBBBBBBBBBBBBBB", Revision: 1}}
	return e
}

// fill appends n events in transactions of batch, unsynced (a quick
// build), and returns their canonical bytes in all.
func fill(b testing.TB, db *bbolt.DB, n, batch int) (canonical int) {
	b.Helper()
	for start := 0; start < n; start += batch {
		err := db.Update(func(tx *bbolt.Tx) error {
			for i := start; i < min(start+batch, n); i++ {
				if err := boltlog.Bind(kv.Wrap(tx)).Append(benchEvent(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	db.View(func(tx *bbolt.Tx) error {
		return raw(kv.Wrap(tx), func(_ uint64, c []byte) error { canonical += len(c); return nil })
	})
	return canonical
}

// onDisk is the bytes of pages the audit buckets hold.
func onDisk(db *bbolt.DB) int {
	var n int
	db.View(func(tx *bbolt.Tx) error {
		for _, name := range []string{"audit_events", "audit_checkpoints"} {
			s := tx.Bucket([]byte(name)).Stats()
			n += s.BranchAlloc + s.LeafAlloc
		}
		return nil
	})
	return n
}

// Ensure the log stays small: the pages of the audit buckets, tree hashes
// included, hold at most 1.3 times the events' canonical bytes, whether
// each commit holds one event (one agent) or several (group commit under
// load). The lone commit is the bound that chose writerd's page size
// (bolt.PageSize).
func TestStorage_BytesPerEvent(t *testing.T) {
	for _, tt := range []struct {
		perCommit int
		max       float64
	}{{1, 1.3}, {4, 1.3}, {32, 1.3}} {
		t.Run(fmt.Sprintf("%d a commit", tt.perCommit), func(t *testing.T) {
			store, err := bolt.Open(t.TempDir()) // as writerd opens its store
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			db := store.Bolt()
			const n = 5000
			canonical := fill(t, db, n, tt.perCommit)
			ratio := float64(onDisk(db)) / float64(canonical)
			t.Logf("%d events: %.0f canonical bytes each, %.0f on disk (%.2fx)", n, float64(canonical)/n, float64(onDisk(db))/n, ratio)
			if ratio > tt.max {
				t.Fatalf("the audit buckets take %.2f times the events' canonical bytes, want at most %.2f", ratio, tt.max)
			}
		})
	}
}

// BenchmarkAppend measures the tree's cost in a durable commit: one event
// appended with its tree hashes, against the same canonical bytes put
// under the same key without them, each in its own fsynced transaction.
//
//	go test -run '^$' -bench BenchmarkAppend -benchtime 2000x ./auditlog
func BenchmarkAppend(b *testing.B) {
	b.Run("tree", func(b *testing.B) {
		db := MustOpen(b)
		b.ResetTimer()
		for i := range b.N {
			if err := db.Update(func(tx *bbolt.Tx) error { return boltlog.Bind(kv.Wrap(tx)).Append(benchEvent(i)) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain", func(b *testing.B) {
		db := MustOpen(b)
		c := func(i int) []byte {
			e := benchEvent(i)
			e.Seq, e.ID = uint64(i+1), "01JGHJ0QZ5BBBBBBBBBBBBBBBB"
			b, _ := e.Canonical()
			return b
		}
		b.ResetTimer()
		for i := range b.N {
			err := db.Update(func(tx *bbolt.Tx) error {
				bk := tx.Bucket([]byte("audit_events"))
				bk.FillPercent = 1
				return bk.Put(key8(uint64(i+1)), c(i))
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkVerify measures Verify over a log of one million events read
// from a bbolt file, in events per second.
//
//	go test -run '^$' -bench BenchmarkVerify -benchtime 1x -timeout 30m ./auditlog
func BenchmarkVerify(b *testing.B) {
	const n = 1_000_000
	db, err := bbolt.Open(filepath.Join(b.TempDir(), "t.db"), 0o600, &bbolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bbolt.Tx) error { return boltlog.Init(kv.Wrap(tx)) }); err != nil {
		b.Fatal(err)
	}
	canonical := fill(b, db, n, 10_000)
	ratio := float64(onDisk(db)) / float64(canonical)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		err := db.View(func(tx *bbolt.Tx) error {
			v, err := auditlog.Verify(auditlog.Input{Events: boltlog.Bind(kv.Wrap(tx)).Leaves(1)})
			if err == nil && (!v.OK() || v.Events != n) {
				b.Fatalf("verify: %+v", v)
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(ratio, "disk/canonical")
}
