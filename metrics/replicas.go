package metrics

import "github.com/prometheus/client_golang/prometheus"

// Replicas is what a daemon last read of the replicas serving on its
// store (pipeline.Replicas): how many, and how many distinct upstreams
// file digests they serve. Neither has a label: a replica's id or host
// would be a series per process start.
type Replicas struct {
	seen    prometheus.Gauge
	digests prometheus.Gauge
}

// NewReplicas creates the collectors and registers them on reg.
func NewReplicas(reg prometheus.Registerer) *Replicas {
	m := &Replicas{
		seen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "writerd_replicas_seen", Help: "Replicas seen on the store lately, this one included, as last read.",
		}),
		digests: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "writerd_replica_config_digests", Help: "Distinct upstreams file digests the replicas seen lately serve (no file counts as one): 1 when they agree.",
		}),
	}
	reg.MustRegister(m.seen, m.digests)
	return m
}

// Set sets what was last read: replicas seen, and the distinct digests
// they serve.
func (m *Replicas) Set(replicas, digests int) {
	if m != nil {
		m.seen.Set(float64(replicas))
		m.digests.Set(float64(digests))
	}
}
