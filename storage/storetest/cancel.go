package storetest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/internal/groupcommit"
)

// cancelPoints are where a call's caller goes away in testCancelled: its
// context is cancelled there, by a hook of the group commit
// (groupcommit.Hooks) where the point is inside the store.
var cancelPoints = []struct {
	name string
	// at returns the hooks that cancel the call's context at its point
	// (nil: the context is cancelled before the call).
	at func(cancel context.CancelFunc) *groupcommit.Hooks
}{
	{"before the lock", nil}, // cancelled before the call is made
	{"before the queue", func(cancel context.CancelFunc) *groupcommit.Hooks {
		return &groupcommit.Hooks{BeforeQueue: cancel}
	}},
	{"inside the batch", func(cancel context.CancelFunc) *groupcommit.Hooks {
		return &groupcommit.Hooks{InBatch: cancel}
	}},
}

func testCancelled(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	for i, pt := range cancelPoints {
		key, name := fmt.Sprintf("key-0000010%d", i), fmt.Sprintf("project-%d", i)
		args := []byte(projectArgs(key, name))
		ctx, cancel := context.WithCancel(context.Background())
		if pt.at == nil {
			cancel()
		} else {
			ctx = groupcommit.WithHooks(ctx, pt.at(cancel))
		}
		r := e.P.Call(ctx, Caller, "create_project", args)
		cancel()
		MustCode(t, r, pipeline.Unavailable, pipeline.RetrySameKey)
		if r.AuditID != "" || len(e.EventsOf(key)) != 0 || e.Record(Caller.Principal, key) != nil {
			t.Fatalf("cancelled %s: audit id %q, events %d, record %+v; want nothing recorded", pt.name, r.AuditID, len(e.EventsOf(key)), e.Record(Caller.Principal, key))
		}
		// The key is unused: the retry runs the write, once.
		first := e.P.Call(context.Background(), Caller, "create_project", args)
		MustOK(t, first)
		again := e.P.Call(context.Background(), Caller, "create_project", args)
		if first.Replayed || !again.Replayed || string(again.Output) != string(first.Output) {
			t.Fatalf("cancelled %s: the retry replayed %v, the next %v; want the retry run and the next replayed", pt.name, first.Replayed, again.Replayed)
		}
		n := 0
		for _, p := range e.Projects() {
			if p.Name == name {
				n++
			}
		}
		if rec := e.Record(Caller.Principal, key); n != 1 || len(e.EventsOf(key)) != 1 || rec == nil || rec.State != idempotency.Completed {
			t.Fatalf("cancelled %s, then retried: %d projects, %d events, record %+v; want the write once", pt.name, n, len(e.EventsOf(key)), rec)
		}
	}

	// Cancelled while it waits for its key's lock, which a call of the
	// same key holds as it runs: answered so, and the key is the running
	// call's, whose record its retry replays; the handler runs once.
	args := []byte(testArgs("key-00000300", "held", ""))
	running := make(chan *pipeline.Result)
	go func() { running <- e.P.Call(context.Background(), Caller, "test_wait", args) }()
	<-e.Started
	waiting, cancelWait := context.WithCancel(context.Background())
	waited := make(chan *pipeline.Result)
	go func() { waited <- e.P.Call(waiting, Caller, "test_wait", args) }()
	time.Sleep(50 * time.Millisecond) // time to reach the lock; cancelled earlier, it is answered alike
	cancelWait()
	w := <-waited
	MustCode(t, w, pipeline.Unavailable, pipeline.RetrySameKey)
	e.Release <- struct{}{}
	held := <-running
	MustOK(t, held)
	if retry := e.P.Call(context.Background(), Caller, "test_wait", args); !retry.Replayed || !bytes.Equal(retry.Output, held.Output) {
		t.Fatalf("the retry of the call cancelled at the lock: %s%s, want the replay of the running call", retry.Output, retry.ErrorJSON())
	}
	if len(e.Started) != 0 || len(e.EventsOf("key-00000300")) != 1 || w.AuditID != "" {
		t.Fatalf("the call cancelled at the lock: %d more runs, %d events; want the running call's one", len(e.Started), len(e.EventsOf("key-00000300")))
	}

	// The probe of issue 26: 200 calls at once whose context ended before
	// they were made. None runs, none records a failure.
	gone, cancelAll := context.WithCancel(context.Background())
	cancelAll()
	events := len(e.Events())
	results := make([]*pipeline.Result, 200)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i] = e.P.Call(gone, Caller, "create_project", []byte(projectArgs(fmt.Sprintf("key-probe-%04d", i), fmt.Sprintf("probe-%d", i))))
		})
	}
	wg.Wait()
	ran, unavailable := 0, 0
	for _, r := range results {
		switch {
		case r.Err == nil:
			ran++
		case r.Err.Code == pipeline.Unavailable && r.Err.Retry == pipeline.RetrySameKey:
			unavailable++
		default:
			t.Errorf("a call whose caller was gone: %s", r.ErrorJSON())
		}
	}
	recorded := len(e.Events()) - events - ran
	t.Logf("200 calls with a cancelled context: %d ran, %d UNAVAILABLE same_key, %d recorded failures", ran, unavailable, recorded)
	if ran != 0 || recorded != 0 {
		t.Fatalf("200 calls with a cancelled context: %d ran, %d failures recorded; want none of either", ran, recorded)
	}

	// A write that ran completes, whatever its caller does meanwhile.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *pipeline.Result)
	go func() { done <- e.P.Call(ctx, Caller, "test_wait", []byte(testArgs("key-00000200", "ran", ""))) }()
	<-e.Started
	cancel()
	e.Release <- struct{}{}
	r := <-done
	MustOK(t, r)
	if evs := e.EventsOf("key-00000200"); len(evs) != 1 || evs[0].ID != r.AuditID {
		t.Fatalf("a write whose caller went away as it ran: events %+v, want its one", evs)
	}
}
