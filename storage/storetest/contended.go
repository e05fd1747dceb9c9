package storetest

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/internal/groupcommit"
)

// testContended forces a write to meet another transaction's lock in its
// batch (groupcommit.Hooks.Contended; a backend that never runs a write
// again alone ignores it), so that it is rolled back to its savepoint and
// run again alone: the attempt that executed the write is answered as a
// write, never as a replay.
func testContended(t *testing.T, b Backend) {
	var log logtest.Buffer
	e := New(t, b, Options{Configure: func(c *pipeline.Config[handlers.Store]) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) }})
	ctx := groupcommit.WithHooks(context.Background(), &groupcommit.Hooks{Contended: func() bool { return true }})
	r := e.P.Call(ctx, Caller, "create_project", []byte(projectArgs("key-00000001", "alpha")))
	MustOK(t, r)
	if r.Replayed || r.Outcome != pipeline.OutcomeOK {
		t.Fatalf("the write that ran answered replayed %v, outcome %s; want ok", r.Replayed, r.Outcome)
	}
	if evs := e.EventsOf("key-00000001"); len(evs) != 1 || evs[0].ID != r.AuditID || len(e.Projects()) != 1 {
		t.Fatalf("events %+v, %d projects; want the write's one of each", evs, len(e.Projects()))
	}
	want := `
# HELP writerd_calls_total Tool calls by tool and outcome (ok, replayed, rejected, refused, conflict, error).
# TYPE writerd_calls_total counter
writerd_calls_total{outcome="ok",tool="create_project"} 1
# HELP writerd_idempotency_results_total Idempotency key lookups of write calls, by result (new, replayed, failed, reused, in_use).
# TYPE writerd_idempotency_results_total counter
writerd_idempotency_results_total{result="new"} 1
`
	if err := testutil.GatherAndCompare(e.Reg, strings.NewReader(want), "writerd_calls_total", "writerd_idempotency_results_total"); err != nil {
		t.Fatalf("the write counted otherwise than one ok call of a new key: %v", err)
	}
	if strings.Contains(log.String(), "a write reported as failed was committed") {
		t.Fatalf("the write was taken for a failed one: %s", log.String())
	}
}
