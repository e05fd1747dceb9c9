package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/internal/groupcommit"
)

// outcomeOf calls get_write_outcome for key on p as c.
func outcomeOf(t testing.TB, p *pipeline.Pipeline[handlers.Store], c pipeline.Caller, key string) (*pipeline.WriteOutcome, []byte) {
	t.Helper()
	r := p.Call(context.Background(), c, pipeline.OutcomeToolName, []byte(`{"key":"`+key+`"}`))
	MustOK(t, r)
	var o pipeline.WriteOutcome
	if err := json.Unmarshal(r.Output, &o); err != nil {
		t.Fatalf("the outcome %s: %v", r.Output, err)
	}
	return &o, r.Output
}

func testWriteOutcome(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	ctx := context.Background()
	bob := pipeline.Caller{Principal: "bob", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}
	mustState := func(o *pipeline.WriteOutcome, raw []byte, want string) {
		t.Helper()
		if o.State != want {
			t.Fatalf("state %s (%s), want %s", o.State, raw, want)
		}
	}
	if o, raw := outcomeOf(t, e.P, Caller, "key-00000001"); o.State != pipeline.WriteNone || o.Result != nil || o.ExpiresAt != nil {
		t.Fatalf("an unknown key: %s, want none and nothing else", raw)
	}

	// Running: held inside its transaction, seen by this process (its key
	// locks) and, on a store several processes share, by another.
	args := []byte(testArgs("key-00000001", "alpha", ""))
	first := make(chan *pipeline.Result)
	go func() { first <- e.P.Call(ctx, Caller, "test_wait", args) }()
	<-e.Started
	o, raw := outcomeOf(t, e.P, Caller, "key-00000001")
	mustState(o, raw, pipeline.WriteRunning)
	var shared bool
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		_, shared = tx.Keys().(pipeline.RunningKeys)
		return nil
	})
	if shared {
		o, raw := outcomeOf(t, e.Pipeline(), Caller, "key-00000001")
		mustState(o, raw, pipeline.WriteRunning)
	}
	if o, raw := outcomeOf(t, e.P, bob, "key-00000001"); o.State != pipeline.WriteNone {
		t.Fatalf("another principal's key, running: %s, want none", raw)
	}
	close(e.Release)
	a := <-first
	MustOK(t, a)

	// Completed: the result byte for byte as a replay returns it.
	o, raw = outcomeOf(t, e.P, Caller, "key-00000001")
	mustState(o, raw, pipeline.WriteCompleted)
	replay := e.Call(Caller, "test_wait", string(args))
	if !replay.Replayed || !bytes.Equal(o.Result, replay.Output) || !bytes.Equal(o.Result, a.Output) {
		t.Fatalf("the outcome's result %s, the replay's %s, the first answer %s: want one", o.Result, replay.Output, a.Output)
	}
	rec := e.Record(Caller.Principal, "key-00000001")
	if o.Tool != "test_wait" || o.AuditID != a.AuditID || o.ExpiresAt == nil || !o.ExpiresAt.Equal(rec.ExpiresAt) || o.Code != "" {
		t.Fatalf("completed: %s; want tool test_wait, audit id %s, expiry %s", raw, a.AuditID, rec.ExpiresAt)
	}
	if o, raw := outcomeOf(t, e.P, bob, "key-00000001"); o.State != pipeline.WriteNone {
		t.Fatalf("another principal's key: %s, want none", raw)
	}

	// Failed, with its code.
	f := e.Call(Caller, "test_fail", testArgs("key-00000002", "beta", "refusal"))
	MustCode(t, f, pipeline.RevisionConflict, pipeline.RetryNewKey)
	o, raw = outcomeOf(t, e.P, Caller, "key-00000002")
	mustState(o, raw, pipeline.WriteFailed)
	if o.Code != string(pipeline.RevisionConflict) || o.Tool != "test_fail" || o.AuditID != f.AuditID || o.AuditID == "" || o.Result != nil {
		t.Fatalf("failed: %s; want code REVISION_CONFLICT and audit id %s", raw, f.AuditID)
	}

	// Asking wrote nothing; at expiry the key is new again.
	events, projects := len(e.Events()), len(e.Projects())
	for range 3 {
		outcomeOf(t, e.P, Caller, "key-00000001")
	}
	if len(e.Events()) != events || len(e.Projects()) != projects {
		t.Fatal("asking for an outcome wrote")
	}
	e.Advance(rec.ExpiresAt.Sub(e.Now()))
	if o, raw := outcomeOf(t, e.P, Caller, "key-00000001"); o.State != pipeline.WriteNone {
		t.Fatalf("at expiry: %s, want none", raw)
	}
	// A key of another form is refused, as idempotency_key would be.
	if r := e.Call(Caller, pipeline.OutcomeToolName, `{"key":"short"}`); r.Err == nil || r.Err.Code != pipeline.InvalidInput || r.Err.Retry != pipeline.RetryNever {
		t.Fatalf("a short key: %s%s, want INVALID_INPUT, never", r.Output, r.ErrorJSON())
	}
}

// testOutcomeQueued holds a call queued in its replica's batch, before it
// runs (groupcommit.Hooks.InBatch), where it holds no claim in the store:
// its own process answers running (its key lock), another replica none,
// and the call resent there with the same key runs once, the held one
// then answered from its record.
func testOutcomeQueued(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	args := []byte(testArgs("key-00000001", "alpha", ""))
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	ctx := groupcommit.WithHooks(context.Background(), &groupcommit.Hooks{InBatch: func() {
		once.Do(func() { close(entered); <-release })
	}})
	held := make(chan *pipeline.Result)
	go func() { held <- e.P.Call(ctx, Caller, "create_project", args) }()
	<-entered
	if o, raw := outcomeOf(t, e.P, Caller, "key-00000001"); o.State != pipeline.WriteRunning {
		t.Fatalf("a call queued in this process: %s, want running", raw)
	}
	other := e.Replica()
	if other == nil {
		t.Log("the backend's data is one store's at a time: no other replica to ask")
		close(release)
		MustOK(t, <-held)
		return
	}
	if o, raw := outcomeOf(t, other, Caller, "key-00000001"); o.State != pipeline.WriteNone || o.Result != nil {
		t.Fatalf("a call queued on another replica: %s, want none (nothing committed, no claim held)", raw)
	}
	// none: resending the call with the same key is safe, and never runs
	// it twice.
	resent := other.Call(context.Background(), Caller, "create_project", args)
	MustOK(t, resent)
	close(release)
	first := <-held
	MustOK(t, first)
	if resent.Replayed || !first.Replayed || !bytes.Equal(first.Output, resent.Output) || first.AuditID != resent.AuditID {
		t.Fatalf("the resent call replayed %v, the held one %v (%s, %s); want the resent run once and the held answered from its record",
			resent.Replayed, first.Replayed, resent.Output, first.Output)
	}
	if n, m := len(e.Projects()), len(e.EventsOf("key-00000001")); n != 1 || m != 1 {
		t.Fatalf("%d projects, %d events, want one write", n, m)
	}
}
