package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writerd/writerd/metrics"
)

// Ensure the self-check's gauges read its state at each scrape: the size
// verified, and 0 then 1 once the log failed.
func TestRegisterSelfCheck(t *testing.T) {
	reg := prometheus.NewRegistry()
	verified, damaged := uint64(12), false
	metrics.RegisterSelfCheck(reg, func() (uint64, bool) { return verified, damaged })
	want := func(size, bad string) {
		t.Helper()
		exp := "# HELP writerd_audit_log_damaged 1 once the audit log failed its self-check (an event edited, missing or moved, or the log not an extension of the checkpoint last signed): no checkpoint is signed until writerd restarts. Else 0.\n" +
			"# TYPE writerd_audit_log_damaged gauge\nwriterd_audit_log_damaged " + bad + "\n" +
			"# HELP writerd_audit_log_verified_size The largest size of the audit log its self-check verified: at start-up, before each checkpoint, and by the background pass.\n" +
			"# TYPE writerd_audit_log_verified_size gauge\nwriterd_audit_log_verified_size " + size + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp)); err != nil {
			t.Error(err)
		}
	}
	want("12", "0")
	verified, damaged = 40, true
	want("40", "1")
}
