package admission

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpudra/gpudra/internal/metricnames"
)

// collectors are the admission check's metrics, registered on controller-runtime's
// registry (metrics.go), and the capacity gauges gpudra-controller registers (Capacity).
func collectors() []prometheus.Collector {
	return []prometheus.Collector{decisions, decisionSeconds, decisionWaitSeconds, writeSeconds, writeConflicts, podsPinned, &Capacity{}}
}

// MetricNames are the names of the metrics gpudra-controller serves from this package,
// sorted (histograms by their base name, without _bucket, _sum and _count).
func MetricNames() []string {
	return metricnames.Of(collectors()...)
}
