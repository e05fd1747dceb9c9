package bolt_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/boltkeys"
	"github.com/writerd/writerd/storage/bolt/kv"
)

var (
	ctx    = context.Background()
	domain = []byte("domain")
)

// initDomain is the init of a domain store: one bucket of its own.
func initDomain(tx *kv.Tx) error {
	_, err := tx.Bolt().CreateBucketIfNotExists(domain)
	return err
}

// MustOpen opens the database in dir with the domain bucket and closes it
// when the test ends.
func MustOpen(t testing.TB, dir string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(dir, initDomain)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// put writes k=v into the domain bucket.
func put(k, v string) func(*kv.Tx) error {
	return func(tx *kv.Tx) error {
		return tx.Bucket(domain).Put([]byte(k), []byte(v))
	}
}

// MustGet reads k from the domain bucket; nil if absent.
func MustGet(t testing.TB, db *bolt.DB, k string) []byte {
	t.Helper()
	var v []byte
	err := db.View(ctx, func(tx *kv.Tx) error {
		v = tx.Bucket(domain).Get([]byte(k))
		if v != nil {
			v = append([]byte(nil), v...)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("View: %v", err)
	}
	return v
}

// Ensure Open creates a private data directory (with its parents), a
// private file, and every store's buckets.
func TestOpen_Creates(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "state")
	dir := filepath.Join(parent, "writerd")
	db := MustOpen(t, dir)

	for path, want := range map[string]os.FileMode{
		parent:                            os.ModeDir | 0o700,
		dir:                               os.ModeDir | 0o700,
		filepath.Join(dir, bolt.FileName): 0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), fi.Mode(), want)
		}
	}
	err := db.Bolt().View(func(tx *bbolt.Tx) error {
		for _, b := range []string{"idempotency", "idempotency_records", "audit_events", "audit_checkpoints", "domain"} {
			if tx.Bucket([]byte(b)) == nil {
				t.Errorf("bucket %s missing", b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Ensure a second Open of a database that is open fails fast with ErrLocked
// (bbolt's flock is per open file, so this holds within one process too),
// and succeeds once the first is closed.
func TestOpen_Locked(t *testing.T) {
	dir := t.TempDir()
	first, err := bolt.Open(dir, initDomain)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Update(ctx, put("k", "v")); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	second, err := bolt.Open(dir)
	if !errors.Is(err, bolt.ErrLocked) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("second Open: err = %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("ErrLocked after %v, want within about a second", d)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again := MustOpen(t, dir)
	if got := MustGet(t, again, "k"); string(got) != "v" {
		t.Errorf("after reopen k = %q, want v", got)
	}
}

// Ensure a failing init fails Open with its error and releases the file.
func TestOpen_InitFails(t *testing.T) {
	dir := t.TempDir()
	broken := errors.New("init failed")
	db, err := bolt.Open(dir, func(*kv.Tx) error { return broken })
	if !errors.Is(err, broken) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("Open: err = %v, want the init's error", err)
	}
	MustOpen(t, dir)
}

// Ensure Update commits what fn wrote, durably (it survives a reopen).
func TestUpdate_Commits(t *testing.T) {
	dir := t.TempDir()
	db, err := bolt.Open(dir, initDomain)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, put("k", "v")); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if got := MustGet(t, db, "k"); string(got) != "v" {
		t.Errorf("k = %q, want v", got)
	}
	db.Close()
	if got := MustGet(t, MustOpen(t, dir), "k"); string(got) != "v" {
		t.Errorf("after reopen k = %q, want v", got)
	}
}

// Ensure an error from fn rolls back everything fn wrote and comes back
// unchanged, whatever its type.
func TestUpdate_RollsBack(t *testing.T) {
	db := MustOpen(t, t.TempDir())
	for _, fail := range []error{
		errors.New("plain"),
		pipeline.Errorf(pipeline.RevisionConflict, "The record changed."),
		context.Canceled,
	} {
		err := db.Update(ctx, func(tx *kv.Tx) error {
			if err := put("k", "v")(tx); err != nil {
				return err
			}
			return fail
		})
		if err != fail {
			t.Errorf("Update returned %#v, want fn's %#v unchanged", err, fail)
		}
		if got := MustGet(t, db, "k"); got != nil {
			t.Fatalf("rolled back, but k = %q", got)
		}
	}
	var writable bool
	_ = db.View(ctx, func(tx *kv.Tx) error { writable = tx.Writable(); return nil })
	if writable {
		t.Errorf("View's transaction is writable")
	}
}

// Ensure that after Close every transaction answers UNAVAILABLE, without
// running fn, and that nothing a client sees names the data directory.
func TestClosed_Unavailable(t *testing.T) {
	dir := t.TempDir()
	db := MustOpen(t, dir)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ran := false
	fn := func(*kv.Tx) error { ran = true; return nil }
	for name, err := range map[string]error{"Update": db.Update(ctx, fn), "View": db.View(ctx, fn)} {
		if code := pipeline.ErrorCode(err); code != pipeline.Unavailable {
			t.Errorf("%s after Close: code %q (%v), want UNAVAILABLE", name, code, err)
		}
		var pe *pipeline.Error
		if !errors.As(err, &pe) {
			t.Fatalf("%s after Close: %T, want a *pipeline.Error", name, err)
		}
		if pe.Message == "" || strings.Contains(pe.Message, dir) || strings.Contains(pe.Message, bolt.FileName) || strings.Contains(err.Error(), dir) {
			t.Errorf("%s after Close: message %q, want a sentence without the path", name, pe.Message)
		}
		if pe.Retry != pipeline.RetrySameKey {
			t.Errorf("%s after Close: retry %q, want same_key (nothing was written)", name, pe.Retry)
		}
	}
	if ran {
		t.Error("fn ran on a closed database")
	}
}

// Ensure Check, bbolt's own checks, passes a new database and names a
// record the idempotency index does not name; and that pipeline.Check on
// it names an idempotency record whose audit event is missing.
func TestCheck(t *testing.T) {
	db := MustOpen(t, t.TempDir())
	if err := db.Bolt().View(bolt.Check); err != nil {
		t.Fatalf("a new database fails the check: %v", err)
	}
	orphan := &idempotency.Record{Principal: "p", Key: "k-orphan1", Digest: "d", State: idempotency.Completed, AuditID: "01J00000000000000000000000"}
	if err := db.Update(ctx, func(tx *kv.Tx) error { return boltkeys.Store{}.Put(tx, orphan) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Bolt().View(bolt.Check); err != nil {
		t.Fatalf("a sound index fails the check: %v", err)
	}
	if err := invariants(t, db); err == nil || !strings.Contains(err.Error(), "p/k-orphan1") {
		t.Fatalf("pipeline.Check = %v, want the orphan record named", err)
	}
	err := db.Update(ctx, func(tx *kv.Tx) error { return tx.Bucket([]byte("idempotency")).Delete([]byte("p\x00k-orphan1")) })
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Bolt().View(bolt.Check); err == nil || !strings.Contains(err.Error(), "p/k-orphan1 is not the one its index entry names") {
		t.Fatalf("Check = %v, want the record its index lost named", err)
	}
}
