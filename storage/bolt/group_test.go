package bolt_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/kv"
)

// Ensure the committer forgets a write once it is answered: a write's fn
// holds its transaction, and with it every page bbolt read or wrote, so a
// batch kept past its commit would hold whole transactions alive (under
// 256 agents, tens of MiB). Writes committed in a batch of several, then
// a lone write, must leave nothing of theirs reachable.
func TestUpdate_ForgetsAnsweredWrites(t *testing.T) {
	db := MustOpen(t, t.TempDir())
	var (
		mu      sync.Mutex
		largest int
	)
	db.ObserveCommits(func(_ time.Duration, writes int) {
		mu.Lock()
		largest = max(largest, writes)
		mu.Unlock()
	})

	var held []weak.Pointer[[]byte]
	for round := 0; round < 5; round++ {
		// Hold the committer in a write while others queue behind it, so
		// that they commit together.
		started, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			first <- db.Update(ctx, func(tx *kv.Tx) error {
				close(started)
				<-release
				return nil
			})
		}()
		<-started
		var wg sync.WaitGroup
		for i := range 8 {
			payload := new(fmt.Appendf(nil, "payload %d.%d", round, i))
			held = append(held, weak.Make(payload))
			key := fmt.Sprintf("k%d.%d", round, i)
			wg.Go(func() {
				if err := db.Update(ctx, func(tx *kv.Tx) error { return put(key, string(*payload))(tx) }); err != nil {
					t.Error(err)
				}
			})
		}
		time.Sleep(20 * time.Millisecond) // time to queue; a smaller batch only makes another round needed
		close(release)
		wg.Wait()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		// A lone write: the batch it commits in reuses the first slot only.
		if err := db.Update(ctx, put("lone", "x")); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		batched := largest > 1
		mu.Unlock()
		if batched {
			break
		}
	}
	if largest < 2 {
		t.Fatalf("no batch of more than one write in 5 rounds")
	}
	runtime.GC()
	runtime.GC()
	for i, p := range held {
		if p.Value() != nil {
			t.Fatalf("write %d of %d is still reachable after it was answered and a later batch committed", i, len(held))
		}
	}
}

// holdCommitter runs a write that waits in its transaction until the
// returned release is called, so that the writes queued meanwhile go to
// the next transaction together.
func holdCommitter(t testing.TB, db *bolt.DB) (release func()) {
	t.Helper()
	started, held := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- db.Update(ctx, func(*kv.Tx) error {
			close(started)
			<-held
			return nil
		})
	}()
	<-started
	return func() {
		close(held)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// Ensure a write that panics inside a group commit gets the panic as its
// error with its changes undone, and the write committed in the same
// transaction beside it is not disturbed: the committer turns each
// write's panic into that write's error, and neither the batch nor the
// process ends. (The conformance suite holds the same promise through the
// interfaces, storage/storetest's UpdateRollsBackOnlyItsOwn; here it is
// shown in one bbolt transaction.)
func TestUpdate_PanicInABatch(t *testing.T) {
	db := MustOpen(t, t.TempDir())
	release := holdCommitter(t, db)
	var mu sync.Mutex
	txids := map[string]int{}
	note := func(name string, tx *kv.Tx) {
		mu.Lock()
		txids[name] = tx.Bolt().ID()
		mu.Unlock()
	}
	var panicked, normal error
	var wg sync.WaitGroup
	wg.Go(func() {
		panicked = db.Update(ctx, func(tx *kv.Tx) error {
			note("panics", tx)
			if err := put("panicked", "v")(tx); err != nil {
				return err
			}
			panic("a write's own panic")
		})
	})
	wg.Go(func() {
		normal = db.Update(ctx, func(tx *kv.Tx) error {
			note("commits", tx)
			return put("normal", "v")(tx)
		})
	})
	time.Sleep(50 * time.Millisecond) // time to queue behind the held write
	release()
	wg.Wait()
	if panicked == nil || !strings.Contains(panicked.Error(), "a write's own panic") {
		t.Fatalf("the panicking write: %v, want its panic as its error", panicked)
	}
	if normal != nil {
		t.Fatalf("the write beside it: %v, want it committed", normal)
	}
	if txids["panics"] != txids["commits"] {
		t.Fatalf("the writes ran in transactions %d and %d, want one", txids["panics"], txids["commits"])
	}
	if got := MustGet(t, db, "panicked"); got != nil {
		t.Fatalf("the panicking write's change is there: %q", got)
	}
	if got := MustGet(t, db, "normal"); string(got) != "v" {
		t.Fatalf("the write beside it is gone: %q", got)
	}
}

// Ensure no transaction commits more than MaxBatch writes: with the
// committer held, three times the bound queue up; once it goes on, they
// commit in transactions of at most MaxBatch each, the first of them full.
func TestUpdate_BoundsTheBatch(t *testing.T) {
	db := MustOpen(t, t.TempDir())
	var mu sync.Mutex
	var sizes []int
	db.ObserveCommits(func(_ time.Duration, writes int) {
		mu.Lock()
		sizes = append(sizes, writes)
		mu.Unlock()
	})
	release := holdCommitter(t, db)
	const writes = 3 * bolt.MaxBatch
	var wg sync.WaitGroup
	for i := range writes {
		wg.Go(func() {
			if err := db.Update(ctx, put(fmt.Sprintf("k%04d", i), "v")); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // time for every write to queue
	release()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	total, largest := 0, 0
	for _, n := range sizes[1:] { // after the held write's own
		total += n
		largest = max(largest, n)
	}
	if total != writes || largest != bolt.MaxBatch {
		t.Fatalf("commits of %v writes after the held one: %d in all, the largest %d; want %d, none over %d and a full one",
			sizes[1:], total, largest, writes, bolt.MaxBatch)
	}
}
