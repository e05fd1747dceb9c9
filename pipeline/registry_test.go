package pipeline_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/writerd/writerd/pipeline"
)

func testTool(name string) *pipeline.Tool[notes] {
	for _, t := range testTools() {
		if t.Name == name {
			return t
		}
	}
	panic("no test tool " + name)
}

// Ensure tools come and go while calls run: a call that found its tool
// finishes with it (its one event, its note); a call after Unregister
// finds no tool (NOT_FOUND, nothing recorded); Register brings it back;
// every change is told to the watchers until they stop; the tools New
// registers stay.
func TestRegistry_UnregisterWhileCalled(t *testing.T) {
	e := MustEnv(t, nil)
	var told atomic.Int64
	stop := e.P.OnToolsChanged(func() { told.Add(1) })

	done := make(chan *pipeline.Result)
	go func() {
		done <- e.call(alice, "put_note", `{"idempotency_key":"k-reg-0001","text":"slow","fail":"slow"}`)
	}()
	<-slowStarted
	e.P.Unregister("put_note")
	after := e.call(alice, "put_note", `{"idempotency_key":"k-reg-0002","text":"after"}`)
	slowRelease <- struct{}{}
	mustOK(t, <-done)
	if after.Err == nil || after.Err.Code != pipeline.NotFound || e.record(alice.Principal, "k-reg-0002") != nil {
		t.Fatalf("a call of an unregistered tool: %s, record %+v; want NOT_FOUND and none", after.ErrorJSON(), e.record(alice.Principal, "k-reg-0002"))
	}
	if e.P.Tool("put_note") != nil || told.Load() != 1 {
		t.Fatalf("after Unregister: tool %v, told %d times", e.P.Tool("put_note"), told.Load())
	}

	// Calls race with the tool's going and coming: each is answered
	// either by the tool or as a tool that is not there.
	var ok atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				r := e.call(alice, "put_note", fmt.Sprintf(`{"idempotency_key":"k-reg-%d-%03d","text":"race"}`, g, i))
				switch {
				case r.Err == nil:
					ok.Add(1)
				case r.Err.Code != pipeline.NotFound:
					t.Errorf("a call while the tool comes and goes: %s", r.ErrorJSON())
				}
			}
		})
	}
	for range 25 {
		if err := e.P.Register(testTool("put_note")); err != nil {
			t.Fatal(err)
		}
		e.P.Unregister("put_note")
	}
	wg.Wait()
	if told.Load() != 51 {
		t.Errorf("told %d times, want 51", told.Load())
	}
	if n := len(e.events()); int64(n) != 1+ok.Load() {
		t.Errorf("%d events, want %d: one per call answered by the tool", n, 1+ok.Load())
	}

	stop()
	e.P.Unregister(pipeline.OutcomeToolName, pipeline.ResolveToolName)
	if e.P.Tool(pipeline.OutcomeToolName) == nil || e.P.Tool(pipeline.ResolveToolName) == nil {
		t.Fatal("Unregister removed a tool New registers")
	}
	if err := e.P.Register(testTool("put_note"), testTool("put_note")); err == nil || e.P.Tool("put_note") != nil {
		t.Fatal("Register took a name twice in one call")
	}
	if err := e.P.Register(testTool("put_note")); err != nil {
		t.Fatal(err)
	}
	if told.Load() != 51 {
		t.Errorf("a stopped watcher was told: %d", told.Load())
	}
}
