package pipeline_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writerd/writerd/pipeline"
)

// Ensure every call is counted once under its tool and outcome, rejections
// under the rule they broke, and key lookups and audit appends by result.
func TestCall_Metrics(t *testing.T) {
	e := MustEnv(t, nil)
	e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"b"}`)
	e.call(alice, "put_note", `{"idempotency_key":"k-00000002","text":"a","text":"b"}`)
	e.call(alice, "put_note", `{"idempotency_key":"k-00000002","text":"`+strings.Repeat("x", 51)+`"}`)
	e.call(alice, "put_note", `{"idempotency_key":"k-00000003","text":"a","fail":"conflict"}`)
	e.call(alice, "no_such_tool", `{}`)
	e.call(pipeline.Caller{Principal: "r", Scopes: pipeline.ScopeRead}, "put_note", `{}`)
	want := `
# HELP writerd_calls_total Tool calls by tool and outcome (ok, replayed, rejected, refused, conflict, error).
# TYPE writerd_calls_total counter
writerd_calls_total{outcome="conflict",tool="put_note"} 1
writerd_calls_total{outcome="ok",tool="put_note"} 1
writerd_calls_total{outcome="refused",tool="put_note"} 1
writerd_calls_total{outcome="rejected",tool="put_note"} 3
writerd_calls_total{outcome="rejected",tool="unknown"} 1
writerd_calls_total{outcome="replayed",tool="put_note"} 1
# HELP writerd_input_rejections_total Calls rejected by the limits or the strict parse, by the rule broken.
# TYPE writerd_input_rejections_total counter
writerd_input_rejections_total{reason="duplicate_member"} 1
writerd_input_rejections_total{reason="maxLength"} 1
# HELP writerd_idempotency_results_total Idempotency key lookups of write calls, by result (new, replayed, failed, reused, in_use).
# TYPE writerd_idempotency_results_total counter
writerd_idempotency_results_total{result="new"} 2
writerd_idempotency_results_total{result="replayed"} 1
writerd_idempotency_results_total{result="reused"} 1
# HELP writerd_audit_appends_total Audit events committed (result ok) and lost because their transaction failed (result failed).
# TYPE writerd_audit_appends_total counter
writerd_audit_appends_total{result="ok"} 2
`
	if err := testutil.GatherAndCompare(e.Reg, strings.NewReader(want),
		"writerd_calls_total", "writerd_input_rejections_total", "writerd_idempotency_results_total", "writerd_audit_appends_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(e.Reg, "writerd_store_commit_duration_seconds"); n != 1 {
		t.Fatalf("commit latency series = %d, want 1", n)
	}
}
