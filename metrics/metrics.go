package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is the set of writerd's collectors.
type Metrics struct {
	calls         *prometheus.CounterVec
	callSeconds   *prometheus.HistogramVec
	rejections    *prometheus.CounterVec
	idempotency   *prometheus.CounterVec
	auditAppends  *prometheus.CounterVec
	commitSeconds prometheus.Histogram
	commitBatch   prometheus.Histogram
	probeSeconds  prometheus.Histogram
	storeReady    prometheus.Gauge
	storeWaits    prometheus.Counter
	transport     *prometheus.CounterVec
	http          *prometheus.CounterVec
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writerd_calls_total", Help: "Tool calls by tool and outcome (ok, replayed, rejected, refused, conflict, error).",
		}, []string{"tool", "outcome"}),
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "writerd_call_duration_seconds", Help: "Time from receiving a tool call to its answer, by tool.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"tool"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writerd_input_rejections_total", Help: "Calls rejected by the limits or the strict parse, by the rule broken.",
		}, []string{"reason"}),
		idempotency: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writerd_idempotency_results_total", Help: "Idempotency key lookups of write calls, by result (new, replayed, failed, reused, in_use).",
		}, []string{"result"}),
		auditAppends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writerd_audit_appends_total", Help: "Audit events committed (result ok) and lost because their transaction failed (result failed).",
		}, []string{"result"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "writerd_store_commit_duration_seconds", Help: "Duration of write transactions, fsync included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		commitBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "writerd_store_commit_batch_size", Help: "Calls committed per write transaction.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		probeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "writerd_store_probe_duration_seconds", Help: "Duration of the readiness check's probe of the store (/readyz): that a write could commit now, writing nothing.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		storeReady: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "writerd_store_ready", Help: "1 if the store passed the last readiness check (/readyz), else 0.",
		}),
		storeWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "writerd_store_wait_expired_total", Help: "Write transactions whose wait for the store (--store-wait) ran out: each call answered UNAVAILABLE with retry same_key.",
		}),
		transport: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writerd_transport_errors_total", Help: "Frames and requests refused or failed before a call, by transport (stdio, http) and kind.",
		}, []string{"transport", "kind"}),
		http: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writerd_http_requests_total", Help: "HTTP requests by route (the pattern served, or unmatched) and status code.",
		}, []string{"route", "code"}),
	}
	reg.MustRegister(m.calls, m.callSeconds, m.rejections, m.idempotency, m.auditAppends,
		m.commitSeconds, m.commitBatch, m.probeSeconds, m.storeReady, m.storeWaits, m.transport, m.http)
	return m
}

// RegisterProcess registers what every daemon exports beside its own
// metrics: the Go runtime's and the process's collectors, and
// writerd_build_info, a gauge of 1 labelled with the version and the Go
// version it was built with.
func RegisterProcess(reg prometheus.Registerer, version, goVersion string) {
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "writerd_build_info", Help: "Always 1; its labels name the build.",
	}, []string{"version", "goversion"})
	info.WithLabelValues(version, goVersion).Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), info)
}

// TransportError counts a frame or request refused or failed before any
// call: kind is one of a transport's bounded kinds.
func (m *Metrics) TransportError(transport, kind string) {
	if m != nil {
		m.transport.WithLabelValues(transport, kind).Inc()
	}
}

// HTTPRequest counts an HTTP request by its route, a pattern of the
// server's own (never the path a client sent), and its status code.
func (m *Metrics) HTTPRequest(route string, code int) {
	if m != nil {
		m.http.WithLabelValues(route, strconv.Itoa(code)).Inc()
	}
}

// Call counts a finished call and its latency.
func (m *Metrics) Call(tool, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(tool, outcome).Inc()
	m.callSeconds.WithLabelValues(tool).Observe(d.Seconds())
}

// Rejection counts a call rejected by the limits or the strict parse.
func (m *Metrics) Rejection(reason string) {
	if m != nil {
		m.rejections.WithLabelValues(reason).Inc()
	}
}

// Idempotency counts the result of a key lookup.
func (m *Metrics) Idempotency(result string) {
	if m != nil {
		m.idempotency.WithLabelValues(result).Inc()
	}
}

// AuditAppend counts an audit event committed, or lost with its
// transaction.
func (m *Metrics) AuditAppend(committed bool) {
	if m == nil {
		return
	}
	result := "ok"
	if !committed {
		result = "failed"
	}
	m.auditAppends.WithLabelValues(result).Inc()
}

// StoreProbe observes the readiness check's probe of the store: how long
// it took (a replica whose link to its store is slow shows it here
// first) and whether it passed.
func (m *Metrics) StoreProbe(d time.Duration, ok bool) {
	if m == nil {
		return
	}
	m.probeSeconds.Observe(d.Seconds())
	if ok {
		m.storeReady.Set(1)
	} else {
		m.storeReady.Set(0)
	}
}

// StoreWaitExpired counts a write transaction whose wait for the store ran
// out.
func (m *Metrics) StoreWaitExpired() {
	if m == nil {
		return
	}
	m.storeWaits.Inc()
}

// Commit observes a write transaction: its duration and how many calls it
// committed.
func (m *Metrics) Commit(d time.Duration, batch int) {
	if m == nil {
		return
	}
	m.commitSeconds.Observe(d.Seconds())
	m.commitBatch.Observe(float64(batch))
}
