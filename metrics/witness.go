package metrics

import "github.com/prometheus/client_golang/prometheus"

// Witnesses is the set of collectors of the witness cosigner (package
// auditlog/witness): what each witness answered, the size each is
// believed to know, and whether the latest checkpoint has its quorum.
// Witness labels are the names of the witnesses' keys, from the
// daemon's configuration: bounded.
type Witnesses struct {
	requests      *prometheus.CounterVec
	size          *prometheus.GaugeVec
	cosignatures  prometheus.Gauge
	lacking       prometheus.Gauge
	withoutQuorum prometheus.Counter
}

// Results of an add-checkpoint request, the result label of
// writerd_audit_witness_requests_total.
const (
	WitnessCosigned    = "cosigned"    // 200, cosignature verified
	WitnessConflict    = "conflict"    // 409: the witness knows another size
	WitnessUnknownKey  = "unknown_key" // 403: the witness does not know the log's key
	WitnessUnknownLog  = "unknown_log" // 404: the witness does not know the log
	WitnessFork        = "fork"        // 422: the consistency proof does not verify
	WitnessBadRequest  = "bad_request" // 400
	WitnessBadAnswer   = "bad_answer"  // an answer that is not what the protocol says, or a cosignature that does not verify
	WitnessUnreachable = "unreachable" // no answer: refused, timed out
	WitnessError       = "error"       // any other status
)

// NewWitnesses creates the cosigner's collectors and registers them on
// reg. The daemon registers them only when it has witnesses.
func NewWitnesses(reg prometheus.Registerer) *Witnesses {
	m := &Witnesses{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "writerd_audit_witness_requests_total", Help: "add-checkpoint requests sent to each witness, by result (cosigned, conflict, unknown_key, unknown_log, fork, bad_request, bad_answer, unreachable, error).",
		}, []string{"witness", "result"}),
		size: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "writerd_audit_witness_tree_size", Help: "The tree size each witness is believed to know: the last it cosigned or said it knows.",
		}, []string{"witness"}),
		cosignatures: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "writerd_audit_witness_cosignatures", Help: "Cosignatures of the configured witnesses on the latest checkpoint.",
		}),
		lacking: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "writerd_audit_witness_quorum_missing", Help: "1 while the latest checkpoint lacks its witness quorum, else 0.",
		}),
		withoutQuorum: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "writerd_audit_checkpoints_without_quorum_total", Help: "Checkpoints that lacked their witness quorum once sent to the witnesses, each counted once.",
		}),
	}
	reg.MustRegister(m.requests, m.size, m.cosignatures, m.lacking, m.withoutQuorum)
	return m
}

// Request counts an add-checkpoint request to a witness and its result.
func (m *Witnesses) Request(witness, result string) {
	if m != nil {
		m.requests.WithLabelValues(witness, result).Inc()
	}
}

// Known sets the size a witness is believed to know.
func (m *Witnesses) Known(witness string, size uint64) {
	if m != nil {
		m.size.WithLabelValues(witness).Set(float64(size))
	}
}

// Latest sets the cosignatures on the latest checkpoint and whether it
// lacks its quorum.
func (m *Witnesses) Latest(cosignatures int, lacking bool) {
	if m == nil {
		return
	}
	m.cosignatures.Set(float64(cosignatures))
	v := 0.0
	if lacking {
		v = 1
	}
	m.lacking.Set(v)
}

// WithoutQuorum counts a checkpoint that lacked its quorum.
func (m *Witnesses) WithoutQuorum() {
	if m != nil {
		m.withoutQuorum.Inc()
	}
}
