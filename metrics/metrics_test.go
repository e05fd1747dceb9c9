package metrics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writerd/writerd/metrics"
)

// Ensure a nil *Metrics counts nothing and does not panic: an embedded
// pipeline may run without metrics.
func TestNil(t *testing.T) {
	var m *metrics.Metrics
	m.Call("t", "ok", time.Millisecond)
	m.Rejection("syntax")
	m.Idempotency("new")
	m.AuditAppend(true)
	m.Commit(time.Millisecond, 1)
}

// Ensure every collector registers under its writerd_ name, so that two
// pipelines cannot share a registry by accident.
func TestNew_Registers(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	defer func() {
		if recover() == nil {
			t.Fatal("registering twice on one registry did not panic")
		}
	}()
	metrics.New(reg)
}

func ExampleMetrics_Call() {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.Call("create_project", "ok", 3*time.Millisecond)
	m.Call("create_project", "replayed", time.Millisecond)
	fmt.Println(testutil.CollectAndCount(reg, "writerd_calls_total"))
	// Output: 2
}
