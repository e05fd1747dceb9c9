package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Upstreams is the set of collectors of writes outside the store
// (docs/DESIGN.md section 5b): whether each upstream is up, its calls by
// how they ended and their latency, and the writes still pending or of
// unknown outcome. Upstream labels are the names in the operator's
// config file: bounded; results are handlers/upstream's End values.
type Upstreams struct {
	up          *prometheus.GaugeVec
	calls       *prometheus.CounterVec
	callSeconds *prometheus.HistogramVec
	pending     prometheus.Gauge
	unknown     prometheus.Gauge
}

// NewUpstreams creates the collectors and registers them on reg. The
// daemon registers them only when it has upstreams.
func NewUpstreams(reg prometheus.Registerer) *Upstreams {
	m := &Upstreams{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "writerd_upstream_up", Help: "1 while the upstream is connected and its tools are served, else 0.",
		}, []string{"upstream"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writerd_upstream_calls_total", Help: "Calls sent to each upstream, by how they ended (answered, refused, not_sent, error, lost, timeout, bad_answer; for an HTTP API also in_flight, key_reused, credential_refused, not_run).",
		}, []string{"upstream", "result"}),
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "writerd_upstream_call_seconds", Help: "How long each upstream took to answer a call.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"upstream"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "writerd_pending_writes", Help: "Writes outside the store recorded pending: sent or about to be, their outcome not yet recorded.",
		}),
		unknown: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "writerd_outcome_unknown", Help: "Writes outside the store whose outcome is unknown and not yet resolved by an operator.",
		}),
	}
	reg.MustRegister(m.up, m.calls, m.callSeconds, m.pending, m.unknown)
	return m
}

// Up records whether an upstream is up.
func (m *Upstreams) Up(upstream string, up bool) {
	if m != nil {
		v := 0.0
		if up {
			v = 1
		}
		m.up.WithLabelValues(upstream).Set(v)
	}
}

// Forget drops an upstream's up gauge: a reload removed it.
func (m *Upstreams) Forget(upstream string) {
	if m != nil {
		m.up.DeleteLabelValues(upstream)
	}
}

// Call counts one call to an upstream, how it ended and how long it took.
func (m *Upstreams) Call(upstream, result string, d time.Duration) {
	if m != nil {
		m.calls.WithLabelValues(upstream, result).Inc()
		m.callSeconds.WithLabelValues(upstream).Observe(d.Seconds())
	}
}

// Unsettled sets the numbers of pending writes and of unknown ones not
// yet resolved.
func (m *Upstreams) Unsettled(pending, unknown int) {
	if m != nil {
		m.pending.Set(float64(pending))
		m.unknown.Set(float64(unknown))
	}
}
