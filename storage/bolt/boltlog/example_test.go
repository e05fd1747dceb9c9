package boltlog_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/storage/bolt/boltlog"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// Events are appended inside the write transaction they record: a write
// that rolls back takes its event, and its sequence number, with it.
func ExampleLog_Append() {
	dir, err := os.MkdirTemp("", "auditlog-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := bolt.Open(filepath.Join(dir, "audit.db"), 0o600, nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	if err := db.Update(func(tx *bolt.Tx) error { return boltlog.Init(kv.Wrap(tx)) }); err != nil {
		panic(err)
	}
	event := func(key string) *auditlog.Event {
		return &auditlog.Event{
			Time: time.Now(), Principal: "agent", Transport: "go", Tool: "create_project",
			IdempotencyKey: key, Outcome: auditlog.OK,
		}
	}
	write := func(key string, fail bool) {
		e := event(key)
		err := db.Update(func(tx *bolt.Tx) error {
			if err := boltlog.Bind(kv.Wrap(tx)).Append(e); err != nil {
				return err
			}
			if fail {
				return errors.New("the write failed")
			}
			return nil
		})
		fmt.Printf("%s: seq %d, committed %t\n", key, e.Seq, err == nil)
	}
	write("k-00000001", false)
	write("k-00000002", true)
	write("k-00000003", false)

	_ = db.View(func(tx *bolt.Tx) error {
		return auditlog.All(boltlog.Bind(kv.Wrap(tx)), func(e *auditlog.Event) error {
			fmt.Println(e.Seq, e.IdempotencyKey)
			return nil
		})
	})
	// Output:
	// k-00000001: seq 1, committed true
	// k-00000002: seq 2, committed false
	// k-00000003: seq 2, committed true
	// 1 k-00000001
	// 2 k-00000003
}
