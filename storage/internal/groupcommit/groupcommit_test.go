package groupcommit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/storage/internal/groupcommit"
)

var errClosed = errors.New("closed")

// write is a test unit: a name, and what it does when its batch runs it.
type write struct {
	name string
	fn   func(string) error
}

// recorder is a backend's commit that runs each unit of a batch through
// groupcommit.Run, as the backends do, and records the batches.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	// hold, while not nil, is waited for by the first commit, which closes
	// held first: the writes queued meanwhile go to the next batch.
	held, hold chan struct{}
}

func (r *recorder) commit(batch []*groupcommit.Unit[write]) []*groupcommit.Unit[write] {
	names := make([]string, len(batch))
	for i, u := range batch {
		names[i] = u.Write.name
	}
	r.mu.Lock()
	r.batches = append(r.batches, names)
	hold := r.hold
	r.hold = nil
	r.mu.Unlock()
	if hold != nil {
		close(r.held)
		<-hold
	}
	for _, u := range batch {
		if u.Write.fn != nil {
			u.Err = groupcommit.Run(u.Write.fn, u.Write.name)
		}
		u.Answer()
	}
	return nil
}

func (r *recorder) recorded() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// holdLoop submits a write whose commit waits until release is called,
// so that the writes submitted meanwhile queue behind it. release waits
// for the held write's answer.
func holdLoop(t *testing.T, c *groupcommit.Committer[write], r *recorder) (release func()) {
	t.Helper()
	r.mu.Lock()
	r.held, r.hold = make(chan struct{}), make(chan struct{})
	held, hold := r.held, r.hold
	r.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- c.Submit(context.Background(), write{name: "held"}) }()
	<-held
	return func() {
		close(hold)
		if err := <-done; err != nil {
			t.Errorf("the held write: %v", err)
		}
	}
}

// Ensure no batch holds more than the bound: with the loop held in a
// commit, three times the bound queue up (a bound's worth in the queue,
// the rest waiting to enter it); once it goes on, they commit in batches
// of at most the bound, every one of them committed once, the first
// batch full.
func TestCommitter_BoundsTheBatch(t *testing.T) {
	const bound = 8
	r := &recorder{}
	c := groupcommit.Start(bound, errClosed, r.commit)
	defer c.Stop()
	release := holdLoop(t, c, r)
	const writes = 3 * bound
	var wg sync.WaitGroup
	for i := range writes {
		wg.Go(func() {
			if err := c.Submit(context.Background(), write{name: fmt.Sprint(i)}); err != nil {
				t.Error(err)
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // time for every write to queue or wait to
	release()
	wg.Wait()
	batches := r.recorded()[1:] // after the held write's own
	seen := map[string]bool{}
	for _, b := range batches {
		if len(b) > bound {
			t.Fatalf("a batch of %d writes, over the bound %d: %v", len(b), bound, batches)
		}
		for _, name := range b {
			if seen[name] {
				t.Fatalf("write %s committed twice: %v", name, batches)
			}
			seen[name] = true
		}
	}
	if len(seen) != writes || len(batches[0]) != bound {
		t.Fatalf("batches %v: %d writes committed, the first batch of %d; want %d, and a full first batch of %d",
			batches, len(seen), len(batches[0]), writes, bound)
	}
}

// Ensure a unit that panics gets its panic as its error, and the units of
// its batch beside it, before and after it, run and are answered as if it
// had not: the panic is recovered in Run, the one place a write's panic
// becomes an error, and neither the batch nor the loop ends.
func TestCommitter_PanicInABatch(t *testing.T) {
	r := &recorder{}
	c := groupcommit.Start(8, errClosed, r.commit)
	defer c.Stop()
	release := holdLoop(t, c, r)
	var mu sync.Mutex
	ran := map[string]bool{}
	run := func(name string) error {
		mu.Lock()
		ran[name] = true
		mu.Unlock()
		return nil
	}
	answers := make([]error, 3)
	var wg sync.WaitGroup
	for i, w := range []write{
		{name: "before", fn: run},
		{name: "panics", fn: func(string) error { panic("a unit's own panic") }},
		{name: "after", fn: run},
	} {
		wg.Go(func() { answers[i] = c.Submit(context.Background(), w) })
		time.Sleep(20 * time.Millisecond) // in this order
	}
	release()
	wg.Wait()
	if err := answers[1]; err == nil || !strings.HasPrefix(err.Error(), "panic: a unit's own panic\n") {
		t.Fatalf("the panicking unit: %v, want its panic (and the stack) as its error", err)
	}
	if answers[0] != nil || answers[2] != nil || !ran["before"] || !ran["after"] {
		t.Fatalf("the units beside it: answered %v and %v, ran %v; want both run and answered nil", answers[0], answers[2], ran)
	}
	if got := r.recorded(); len(got) != 2 || !slices.Equal(got[1], []string{"before", "panics", "after"}) {
		t.Fatalf("batches %v, want the held write's, then the three together", got)
	}
	// The loop goes on.
	if err := c.Submit(context.Background(), write{name: "next", fn: run}); err != nil || !ran["next"] {
		t.Fatalf("a write after the panic: %v, ran %v", err, ran["next"])
	}
}

// Ensure Stop waits for the batch in flight, and the writes still queued
// when the loop stops are answered with the closed error without being
// run: every write is either committed and answered nil, or answered
// closed and never committed; Stop returns only once every caller has its
// answer; a write after Stop is answered closed. The loop may take one
// more batch before it sees the stop (it does not prefer either), so the
// rounds go on until one drained.
func TestCommitter_StopDrains(t *testing.T) {
	drained := false
	for round := 0; round < 30 && !drained; round++ {
		r := &recorder{}
		c := groupcommit.Start(8, errClosed, r.commit)
		release := holdLoop(t, c, r)
		const writes = 5
		answers := make([]error, writes)
		var wg sync.WaitGroup
		for i := range writes {
			wg.Go(func() { answers[i] = c.Submit(context.Background(), write{name: fmt.Sprint(i)}) })
		}
		time.Sleep(20 * time.Millisecond) // time to queue
		stopped := make(chan struct{})
		go func() {
			c.Stop()
			close(stopped)
		}()
		<-c.Stopping()
		select {
		case <-stopped:
			t.Fatal("Stop returned while a batch was in flight")
		case <-time.After(20 * time.Millisecond):
		}
		release()
		<-stopped
		wg.Wait()
		committed := map[string]bool{}
		for _, b := range r.recorded() {
			for _, name := range b {
				committed[name] = true
			}
		}
		for i, err := range answers {
			switch {
			case err == nil && committed[fmt.Sprint(i)]:
			case errors.Is(err, errClosed) && !committed[fmt.Sprint(i)]:
				drained = true
			default:
				t.Fatalf("write %d: answered %v, committed %v", i, err, committed[fmt.Sprint(i)])
			}
		}
		if err := c.Submit(context.Background(), write{name: "late"}); !errors.Is(err, errClosed) {
			t.Fatalf("a write after Stop: %v, want the closed error", err)
		}
	}
	if !drained {
		t.Fatal("in 30 rounds the loop never stopped with writes still queued")
	}
}

// Ensure the units a commit returns go first, in their order, in the next
// batch, before the writes queued meanwhile; and a unit handed aside (Go)
// is answered by its f, with Stop waiting for f rather than answering it
// closed.
func TestCommitter_AgainAndAside(t *testing.T) {
	var (
		mu      sync.Mutex
		batches [][]string
		c       *groupcommit.Committer[write]
	)
	hold, held := make(chan struct{}), make(chan struct{})
	aside, asideRuns := make(chan struct{}), make(chan struct{})
	again := map[string]bool{"b": true, "a": true}
	commit := func(batch []*groupcommit.Unit[write]) (next []*groupcommit.Unit[write]) {
		var names []string
		for _, u := range batch {
			names = append(names, u.Write.name)
		}
		mu.Lock()
		batches = append(batches, names)
		first := len(batches) == 1
		mu.Unlock()
		if first {
			close(held)
			<-hold
		}
		for _, u := range batch {
			switch {
			case again[u.Write.name]:
				delete(again, u.Write.name)
				next = append(next, u)
			case u.Write.name == "aside":
				c.Go(func() {
					close(asideRuns)
					<-aside
					u.Err = errors.New("answered aside")
					u.Answer()
				})
			default:
				u.Answer()
			}
		}
		slices.Reverse(next) // their order is the commit's, not the batch's
		return next
	}
	c = groupcommit.Start(8, errClosed, commit)
	answers := map[string]error{}
	var amu sync.Mutex
	var wg sync.WaitGroup
	submit := func(name string) {
		wg.Go(func() {
			err := c.Submit(context.Background(), write{name: name})
			amu.Lock()
			answers[name] = err
			amu.Unlock()
		})
	}
	submit("held")
	<-held
	for _, name := range []string{"a", "b", "c"} {
		submit(name)
		time.Sleep(20 * time.Millisecond) // in this order
	}
	close(hold)
	// a and b come back from the batch after the held one, and are the
	// next batch, taken at once: nothing else is queued.
	for {
		mu.Lock()
		n := len(batches)
		mu.Unlock()
		if n >= 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	submit("aside")
	<-asideRuns
	stopped := make(chan struct{})
	go func() {
		c.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Stop returned before the unit handed aside was answered")
	case <-time.After(50 * time.Millisecond):
	}
	close(aside)
	<-stopped
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(batches[1], []string{"a", "b", "c"}) || !slices.Equal(batches[2], []string{"b", "a"}) {
		t.Fatalf("batches %v: want [a b c], then b and a, in the order they came back", batches)
	}
	if err := answers["aside"]; err == nil || err.Error() != "answered aside" {
		t.Fatalf("the unit handed aside: %v, want its f's answer", err)
	}
	for _, name := range []string{"held", "a", "b", "c"} {
		if answers[name] != nil {
			t.Fatalf("%s: %v", name, answers[name])
		}
	}
}

// Ensure an Observer tells the function last set, and no one before any
// is set or once nil is.
func TestObserver(t *testing.T) {
	var o groupcommit.Observer
	o.Observe(time.Second, 1) // no one to tell
	var got []int
	o.Set(func(_ time.Duration, writes int) { got = append(got, writes) })
	o.Observe(time.Millisecond, 2)
	o.Set(func(_ time.Duration, writes int) { got = append(got, 10*writes) })
	o.Observe(time.Millisecond, 3)
	o.Set(nil)
	o.Observe(time.Millisecond, 4)
	if !slices.Equal(got, []int{2, 30}) {
		t.Fatalf("observed %v, want [2 30]", got)
	}
}
