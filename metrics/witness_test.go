package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writerd/writerd/metrics"
)

// Ensure a nil *Witnesses counts nothing and does not panic: a daemon
// without witnesses registers none.
func TestWitnesses_Nil(t *testing.T) {
	var m *metrics.Witnesses
	m.Request("w", metrics.WitnessCosigned)
	m.Known("w", 3)
	m.Latest(1, true)
	m.WithoutQuorum()
}

// Ensure the cosigner's collectors export what they are told, under their
// writerd_ names.
func TestWitnesses_Export(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.NewWitnesses(reg)
	m.Request("a.example/w", metrics.WitnessCosigned)
	m.Request("a.example/w", metrics.WitnessConflict)
	m.Request("a.example/w", metrics.WitnessConflict)
	m.Known("a.example/w", 42)
	m.Latest(1, true)
	m.WithoutQuorum()
	want := `
# HELP writerd_audit_witness_quorum_missing 1 while the latest checkpoint lacks its witness quorum, else 0.
# TYPE writerd_audit_witness_quorum_missing gauge
writerd_audit_witness_quorum_missing 1
# HELP writerd_audit_witness_tree_size The tree size each witness is believed to know: the last it cosigned or said it knows.
# TYPE writerd_audit_witness_tree_size gauge
writerd_audit_witness_tree_size{witness="a.example/w"} 42
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "writerd_audit_witness_quorum_missing", "writerd_audit_witness_tree_size"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(reg, "writerd_audit_witness_requests_total"); got != 2 {
		t.Errorf("%d request series, want 2 (cosigned, conflict)", got)
	}
	m.Latest(2, false)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP writerd_audit_witness_cosignatures Cosignatures of the configured witnesses on the latest checkpoint.
# TYPE writerd_audit_witness_cosignatures gauge
writerd_audit_witness_cosignatures 2
# HELP writerd_audit_witness_quorum_missing 1 while the latest checkpoint lacks its witness quorum, else 0.
# TYPE writerd_audit_witness_quorum_missing gauge
writerd_audit_witness_quorum_missing 0
`), "writerd_audit_witness_cosignatures", "writerd_audit_witness_quorum_missing"); err != nil {
		t.Error(err)
	}
}
