package boltdb_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/writerd/writerd/pipeline/boltdb/kv"
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
