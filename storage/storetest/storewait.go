package storetest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

// testStoreWait holds a store's commits up with a write that runs in its
// batch until released (test_wait): a write queued behind it is answered
// UNAVAILABLE with retry same_key within the store wait, never later, and
// is never run; the write that was running, past its own wait, is
// answered so too once it has run, and commits; each one's retry runs or
// replays it once.
func testStoreWait(t *testing.T, b Backend) {
	const wait = 400 * time.Millisecond
	e := New(t, b, Options{Configure: func(c *pipeline.Config[handlers.Store]) { c.StoreWait = wait }})

	heldArgs := []byte(testArgs("key-00000400", "held", ""))
	held := make(chan *pipeline.Result)
	go func() { held <- e.P.Call(context.Background(), Caller, "test_wait", heldArgs) }()
	<-e.Started // running in its batch: the store commits nothing until it returns

	queuedArgs := []byte(projectArgs("key-00000401", "queued"))
	begin := time.Now()
	answered := make(chan *pipeline.Result, 1)
	go func() { answered <- e.P.Call(context.Background(), Caller, "create_project", queuedArgs) }()
	var queued *pipeline.Result
	select {
	case queued = <-answered:
	case <-time.After(wait + 2*time.Second):
		e.Release <- struct{}{} // so that the test ends
		t.Fatalf("a write behind a stalled batch is still waiting after %v; want it answered at its store wait, %v", time.Since(begin), wait)
	}
	took := time.Since(begin)
	MustCode(t, queued, pipeline.Unavailable, pipeline.RetrySameKey)
	if took < wait {
		t.Fatalf("a write behind a stalled batch was answered after %v; want its store wait, %v", took, wait)
	}

	// The running write is past its wait too: it is answered once it has
	// run, UNAVAILABLE unless its commit came first.
	time.Sleep(wait)
	e.Release <- struct{}{}
	expired := 1.0
	if h := <-held; h.Err != nil {
		MustCode(t, h, pipeline.Unavailable, pipeline.RetrySameKey)
		expired++
	}
	if n := counter(t, e.Reg, "writerd_store_wait_expired_total"); n != expired {
		t.Fatalf("writerd_store_wait_expired_total = %v, want %v", n, expired)
	}

	// The queued write never ran: nothing of it is recorded, and its retry
	// runs it once.
	if e.Record(Caller.Principal, "key-00000401") != nil || len(e.EventsOf("key-00000401")) != 0 {
		t.Fatalf("the write answered at its wait before it ran left record %+v and %d events; want nothing", e.Record(Caller.Principal, "key-00000401"), len(e.EventsOf("key-00000401")))
	}
	first := e.P.Call(context.Background(), Caller, "create_project", queuedArgs)
	MustOK(t, first)
	if again := e.P.Call(context.Background(), Caller, "create_project", queuedArgs); !again.Replayed || !bytes.Equal(again.Output, first.Output) {
		t.Fatalf("the retry's retry: %s%s, want the replay", again.Output, again.ErrorJSON())
	}

	// The held write ran past its wait: it committed after its answer
	// (bbolt), or its statements' bound ended its transaction (PostgreSQL:
	// tx.within). Either way its key decides: the retry replays it, or runs
	// it once.
	rec := e.Record(Caller.Principal, "key-00000400")
	committed := rec != nil && rec.State == idempotency.Completed
	if !committed && (rec != nil || len(e.EventsOf("key-00000400")) != 0) {
		t.Fatalf("the write that ran past its wait and did not commit left record %+v and %d events; want nothing", rec, len(e.EventsOf("key-00000400")))
	}
	retried := make(chan *pipeline.Result, 1)
	go func() { retried <- e.P.Call(context.Background(), Caller, "test_wait", heldArgs) }()
	if !committed {
		<-e.Started
		e.Release <- struct{}{}
	}
	retry := <-retried
	if committed != retry.Replayed || retry.Err != nil || len(e.Started) != 0 {
		t.Fatalf("the retry of the write answered at its wait after it ran (committed: %v): replayed %v, %d more runs%s; want the replay if it committed, else one run", committed, retry.Replayed, len(e.Started), retry.ErrorJSON())
	}
	if rec := e.Record(Caller.Principal, "key-00000400"); rec == nil || rec.State != idempotency.Completed || len(e.EventsOf("key-00000400")) != 1 {
		t.Fatalf("the write that ran past its wait, then its retry: record %+v, %d events; want it committed once", rec, len(e.EventsOf("key-00000400")))
	}
	t.Logf("the write that ran past its wait committed after its answer: %v", committed)
}

// counter is the value of the counter name on reg (0 if it has none).
func counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
