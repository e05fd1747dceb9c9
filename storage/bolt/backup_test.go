package bolt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// mustBackup backs db up into a new directory, as its writerd.db, and
// returns the directory and the size begin was told.
func mustBackup(t testing.TB, db *bolt.DB) (string, int64) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, bolt.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var announced int64 = -1
	n, err := db.Backup(ctx, func(size int64) (io.Writer, error) {
		announced = size
		return f, nil
	})
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if n != announced {
		t.Fatalf("Backup wrote %d bytes, announced %d", n, announced)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return dir, announced
}

// Ensure a backup taken while 16 writers commit holds every write
// acknowledged before it began, is exactly the size it announced, and is
// a whole database: CheckBackup passes it, and Open and bbolt's own
// consistency check accept it.
func TestBackup_ConsistentUnderWrites(t *testing.T) {
	db := MustOpen(t, t.TempDir())
	var (
		mu    sync.Mutex
		acked []string
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("w%02d-%06d", w, i)
				if err := db.Update(ctx, put(k, k)); err != nil {
					t.Errorf("Update: %v", err)
					return
				}
				mu.Lock()
				acked = append(acked, k)
				mu.Unlock()
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	before := append([]string(nil), acked...)
	mu.Unlock()
	dir, size := mustBackup(t, db)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if len(before) == 0 {
		t.Fatal("no write was acknowledged before the backup")
	}

	info, err := bolt.CheckBackup(filepath.Join(dir, bolt.FileName))
	if err != nil {
		t.Fatalf("CheckBackup: %v", err)
	}
	if info.Size != size {
		t.Errorf("CheckBackup saw %d bytes, the backup announced %d", info.Size, size)
	}
	backup := MustOpen(t, dir) // Open runs the file checks and bbolt's consistency check
	for _, k := range before {
		if got := MustGet(t, backup, k); string(got) != k {
			t.Fatalf("%s, acknowledged before the backup, is %q in it", k, got)
		}
	}
	var inCopy int
	backup.Bolt().View(func(tx *bbolt.Tx) error {
		inCopy = tx.Bucket(domain).Stats().KeyN
		return nil
	})
	mu.Lock()
	total := len(acked)
	mu.Unlock()
	if inCopy < len(before) || inCopy > total {
		t.Errorf("the backup holds %d writes, want from %d (acknowledged before) to %d (all)", inCopy, len(before), total)
	}
	t.Logf("%d writes acknowledged before the backup, %d in it, %d in all; %d bytes", len(before), inCopy, total, size)
}

// Ensure a backup that begin refuses writes nothing and returns begin's
// error unchanged, and that one whose writer fails returns the writer's.
func TestBackup_Errors(t *testing.T) {
	db := MustOpen(t, t.TempDir())
	if err := db.Update(ctx, put("k", "v")); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	n, err := db.Backup(ctx, func(int64) (io.Writer, error) { return nil, refused })
	if err != refused || n != 0 {
		t.Errorf("begin refused: %d, %v; want 0 and begin's error", n, err)
	}
	broken := errors.New("disk full")
	n, err = db.Backup(ctx, func(int64) (io.Writer, error) { return failAfter{limit: 1 << 14, err: broken}, nil })
	if !errors.Is(err, broken) {
		t.Errorf("writer failed after %d bytes: %v; want the writer's error", n, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	n, err = db.Backup(cctx, func(int64) (io.Writer, error) { cancel(); return io.Discard, nil })
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("context ended: %d, %v; want 0 bytes and context.Canceled", n, err)
	}
}

// failAfter takes limit bytes, then fails every write.
type failAfter struct {
	limit int
	err   error
}

func (f failAfter) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		return 0, f.err
	}
	return len(p), nil
}

// Ensure Close does not wait for ever on a backup whose reader is slow:
// the backup ends at its next write, UNAVAILABLE, and Close returns.
func TestBackup_CloseEndsIt(t *testing.T) {
	dir := t.TempDir()
	db, err := bolt.Open(dir, initDomain)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := db.Update(ctx, put(fmt.Sprintf("k%04d", i), string(make([]byte, 4096)))); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := db.Backup(ctx, func(int64) (io.Writer, error) {
			close(started)
			return slowWriter{50 * time.Millisecond}, nil
		})
		done <- err
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited more than 5s for a backup in progress")
	}
	if err := <-done; pipeline.ErrorCode(err) != pipeline.Unavailable {
		t.Errorf("the backup ended with %v, want UNAVAILABLE", err)
	}
}

type slowWriter struct{ d time.Duration }

func (s slowWriter) Write(p []byte) (int, error) { time.Sleep(s.d); return len(p), nil }

// Ensure CheckBackup refuses what is not a whole writerd database, each
// with a phrase saying what is wrong: a copy cut short, one whose second
// half is zeros, an empty file, a bbolt file of another program; and
// that Held tells a database a process holds from one it does not.
func TestCheckBackup_Refuses(t *testing.T) {
	src := MustOpen(t, t.TempDir())
	for i := range 100 {
		if err := src.Update(ctx, put(fmt.Sprintf("k%04d", i), string(make([]byte, 2048)))); err != nil {
			t.Fatal(err)
		}
	}
	dir, size := mustBackup(t, src)
	whole, err := os.ReadFile(filepath.Join(dir, bolt.FileName))
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.db")
	ob, err := bbolt.Open(other, 0o600, &bbolt.Options{PageSize: bolt.PageSize})
	if err != nil {
		t.Fatal(err)
	}
	ob.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("not-writerd")); return err })
	ob.Close()
	otherBytes, _ := os.ReadFile(other)

	zeros := append([]byte(nil), whole...)
	clear(zeros[size/2:])
	for name, b := range map[string][]byte{
		"cut short":         whole[:size/2],
		"zeros":             zeros,
		"empty":             {},
		"another program's": otherBytes,
	} {
		path := filepath.Join(t.TempDir(), "backup.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := bolt.CheckBackup(path)
		var damaged *bolt.DamagedError
		if !errors.As(err, &damaged) || len(damaged.Problems) == 0 {
			t.Errorf("%s: CheckBackup = %v, want a *DamagedError", name, err)
			continue
		}
		t.Logf("%s: %s", name, damaged.Problems[0])
	}

	live := filepath.Join(t.TempDir(), "live")
	db, err := bolt.Open(live, initDomain)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{filepath.Join(live, bolt.FileName): true, filepath.Join(dir, bolt.FileName): false, filepath.Join(live, "absent.db"): false} {
		if held, err := bolt.Held(path); err != nil || held != want {
			t.Errorf("Held(%s) = %v, %v; want %v", filepath.Base(path), held, err, want)
		}
	}
	db.Close()
	if held, err := bolt.Held(filepath.Join(live, bolt.FileName)); err != nil || held {
		t.Errorf("Held after Close = %v, %v; want false", held, err)
	}
}

// Ensure a backup holds the store's secret of upstream keys: the backup,
// opened read-only, answers the secret the database made.
func TestBackup_HoldsTheSecret(t *testing.T) {
	db := MustOpen(t, t.TempDir())
	s := bolt.NewStorage(db, func(*kv.Tx) any { return nil })
	var made []byte
	err := s.Update(ctx, func(tx pipeline.Tx[any]) error {
		var err error
		made, err = tx.Keys().Secret()
		return err
	})
	if err != nil || len(made) != 32 {
		t.Fatalf("Secret = %x, %v", made, err)
	}
	dir, _ := mustBackup(t, db)
	backup, err := bolt.OpenStorageReadOnly(dir, bolt.Domain[any]{Bind: func(*kv.Tx) any { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer backup.Close()
	var got []byte
	if err := backup.View(ctx, func(tx pipeline.Tx[any]) error {
		var err error
		got, err = tx.Keys().Secret()
		return err
	}); err != nil || !bytes.Equal(got, made) {
		t.Errorf("the backup's secret = %x, %v, want %x", got, err, made)
	}
}
