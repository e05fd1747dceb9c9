package metrics

import "github.com/prometheus/client_golang/prometheus"

// RegisterSelfCheck registers the gauges of the audit log's self-check
// (auditlog.Checkpointer), read from state at each scrape:
// writerd_audit_log_verified_size, the largest size of the log verified
// (at start-up, before each checkpoint, by the background pass), and
// writerd_audit_log_damaged, 1 once the log failed its check (the
// signing stopped, /readyz answers 503), else 0.
func RegisterSelfCheck(reg prometheus.Registerer, state func() (verified uint64, damaged bool)) {
	verified := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "writerd_audit_log_verified_size", Help: "The largest size of the audit log its self-check verified: at start-up, before each checkpoint, and by the background pass.",
	}, func() float64 { v, _ := state(); return float64(v) })
	damaged := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "writerd_audit_log_damaged", Help: "1 once the audit log failed its self-check (an event edited, missing or moved, or the log not an extension of the checkpoint last signed): no checkpoint is signed until writerd restarts. Else 0.",
	}, func() float64 {
		if _, d := state(); d {
			return 1
		}
		return 0
	})
	reg.MustRegister(verified, damaged)
}
